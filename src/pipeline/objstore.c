/* Objects read over HTTP with libcurl (objstore.h).
 *
 * Happy path: obj_open() builds the request URL and credentials, fetches the first range and
 * keeps its ETag and the size from Content-Range, and asks its two read-ahead threads for the
 * next two ranges (If-Match: the ETag); obj_read() hands out the buffered range and, when it is
 * used up, trades buffers with the thread that fetched the next one and asks that thread for the
 * range after those in flight. obj_pread() serves Parquet's reads from a few windows. Failure
 * modes: a transient answer or transport error is retried (fetch()) from the first byte not yet
 * received, with a jittered exponential backoff, until the request's deadline; a 412 is an object
 * changed since it was opened; other answers fail at once, naming the status and the server's
 * error text; a read-ahead's failure reaches the reader when it comes to that range.
 *
 * libcurl is opened on first use (dlopen of libcurl.so.4), not linked: it brings some thirty
 * libraries (TLS, Kerberos, LDAP, IDN, ...) whose loading cost every start of every program
 * about 5 ms of CPU, and most starts never read an object over HTTP. A missing libcurl fails
 * the first such read with a one-line error. */
#include "objstore.h"

#include "common/backoff.h"
#include "common/dynlib.h"
#include "common/error.h"
#include "common/grow.h"
#include "common/sha256.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The largest listing page accepted (a ListObjectsV2 page of 1,000 keys is far smaller). */
#define LIST_PAGE_MAX (64u << 20)
/* The backoff between attempts: from 100 ms doubling to at most 5 s, fully jittered. */
#define BACKOFF_BASE_MS 100u
#define BACKOFF_MAX_MS 5000u
/* How much of an error answer's body is kept for its message. */
#define ERRBODY_MAX 4096u
/* A connection that moves no byte for this long is given up (and the request retried). */
#define STALL_S 20L
/* Random reads (obj_pread) smaller than a window are served from up to PREAD_WINDOWS windows of
 * at most PREAD_WINDOW_MAX bytes (and of at most one range), least recently used replaced
 * first: a Parquet reader interleaving a few column chunks makes one request per window, not
 * one per page header. */
#define PREAD_WINDOWS 4u
#define PREAD_WINDOW_MAX (1u << 20)
/* Ranges an open object reads ahead, each by a thread of its own: with the one being consumed,
 * AHEAD_SLOTS + 1 buffers of one range per object. */
#define AHEAD_SLOTS 2
/* libcurl's receive buffer. */
#define RECV_BUFFER_BYTES (256L * 1024L)
/* A cancelled read notices within this long while it waits to retry. */
#define CANCEL_SLICE_MS 50u
/* Range buffers of closed objects kept for the next ones, at most this many bytes in all: a
 * fresh buffer of 8 MiB costs a page fault per 4 KiB as the first range is copied in (a third of
 * a reader's CPU when objects of a few ranges follow one another). */
#define POOL_BYTES (48u << 20)
#define POOL_SLOTS 8u

/* ---- Range buffers -------------------------------------------------------------------------- */

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t cap;
} pool[POOL_SLOTS];
static size_t pool_n, pool_bytes;

/* A buffer of cap bytes: one a closed object left, or a new one. NULL when out of memory. */
static void *buf_get(size_t cap)
{
    pthread_mutex_lock(&pool_mu);
    for (size_t i = pool_n; i-- > 0;) {
        if (pool[i].cap != cap)
            continue;
        void *p = pool[i].p;
        pool[i] = pool[--pool_n];
        pool_bytes -= cap;
        pthread_mutex_unlock(&pool_mu);
        return p;
    }
    pthread_mutex_unlock(&pool_mu);
    return malloc(cap);
}

/* Gives back a buffer of buf_get(cap): kept for the next object while the pool has room. */
static void buf_put(void *p, size_t cap)
{
    if (!p)
        return;
    pthread_mutex_lock(&pool_mu);
    if (pool_n < POOL_SLOTS && cap <= POOL_BYTES - pool_bytes) {
        pool[pool_n].p = p;
        pool[pool_n++].cap = cap;
        pool_bytes += cap;
        p = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    free(p);
}

/* ---- Counters (obj_stats) ------------------------------------------------------------------ */

/* Requests by operation and HTTP status (0: no answer), body bytes received, and body bytes
 * handed to libcurl to send (a PUT's, once per attempt). Relaxed atomics: a total read while
 * requests run may lag by a few. */
static _Atomic uint64_t stat_requests[OBJ_OP_COUNT][OBJ_STATUS_SLOTS];
static _Atomic uint64_t stat_bytes, stat_bytes_sent;

static void count_request(enum obj_op op, long status)
{
    size_t slot = status >= 100 && status < (long)OBJ_STATUS_SLOTS ? (size_t)status : 0;
    atomic_fetch_add_explicit(&stat_requests[op][slot], 1, memory_order_relaxed);
}

void obj_stats(struct obj_stats *out)
{
    for (size_t op = 0; op < OBJ_OP_COUNT; op++)
        for (size_t c = 0; c < OBJ_STATUS_SLOTS; c++)
            out->requests[op][c] =
                atomic_load_explicit(&stat_requests[op][c], memory_order_relaxed);
    out->bytes = atomic_load_explicit(&stat_bytes, memory_order_relaxed);
    out->bytes_sent = atomic_load_explicit(&stat_bytes_sent, memory_order_relaxed);
}

/* ---- Settings and credentials ------------------------------------------------------------ */

struct creds {
    char key[256]; /* "" for anonymous */
    char secret[256];
    char token[4096];
    char region[64];
    char endpoint[1024]; /* "" for AWS itself */
};

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return dflt;
    return x;
}

/* The settings obj_configure gave (0: none), over the environment's and the defaults. */
static _Atomic uint32_t cfg_retry_ms, cfg_range_bytes;

void obj_configure(uint32_t retry_ms, uint32_t range_bytes)
{
    atomic_store(&cfg_retry_ms, retry_ms);
    atomic_store(&cfg_range_bytes, range_bytes);
}

static uint32_t retry_ms_setting(void)
{
    uint32_t v = atomic_load(&cfg_retry_ms);
    return v ? v
             : (uint32_t)env_u64("SLUICE_OBJECT_RETRY_MS", OBJ_DEFAULT_RETRY_MS, 1,
                                 OBJ_MAX_RETRY_MS);
}

static size_t range_setting(void)
{
    uint32_t v = atomic_load(&cfg_range_bytes);
    return v ? v
             : (size_t)env_u64("SLUICE_OBJECT_RANGE_BYTES", OBJ_DEFAULT_RANGE_BYTES,
                               OBJ_MIN_RANGE_BYTES, OBJ_MAX_RANGE_BYTES);
}

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
}

/* Trims white space at both ends of s in place. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Reads the profile's keys from the shared credentials file, if there is one. */
static void creds_from_file(struct creds *c)
{
    char path[1024];
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    if (file && *file) {
        copy_str(path, sizeof path, file);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home)
            return;
        snprintf(path, sizeof path, "%s/.aws/credentials", home);
    }
    const char *profile = getenv("AWS_PROFILE");
    if (!profile || !*profile)
        profile = "default";
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[4096];
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        char *s = trim(line);
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (e) {
                *e = '\0';
                in = strcmp(trim(s + 1), profile) == 0;
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq || *s == '#' || *s == ';')
            continue;
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        if (strcmp(k, "aws_access_key_id") == 0)
            copy_str(c->key, sizeof c->key, v);
        else if (strcmp(k, "aws_secret_access_key") == 0)
            copy_str(c->secret, sizeof c->secret, v);
        else if (strcmp(k, "aws_session_token") == 0)
            copy_str(c->token, sizeof c->token, v);
    }
    fclose(f);
}

static void creds_load(struct creds *c)
{
    memset(c, 0, sizeof *c);
    const char *k = getenv("AWS_ACCESS_KEY_ID"), *s = getenv("AWS_SECRET_ACCESS_KEY");
    if (k && *k && s && *s) {
        copy_str(c->key, sizeof c->key, k);
        copy_str(c->secret, sizeof c->secret, s);
        copy_str(c->token, sizeof c->token, getenv("AWS_SESSION_TOKEN"));
    } else {
        creds_from_file(c);
    }
    const char *region = getenv("AWS_REGION");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    copy_str(c->region, sizeof c->region, region && *region ? region : "us-east-1");
    const char *ep = getenv("AWS_ENDPOINT_URL_S3");
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    copy_str(c->endpoint, sizeof c->endpoint, ep);
    size_t n = strlen(c->endpoint);
    while (n > 0 && c->endpoint[n - 1] == '/')
        c->endpoint[--n] = '\0';
}

/* The request URL of an s3:// object's key (encoded) or, with key NULL, of its bucket. */
static int s3_base(const struct creds *c, const char *bucket, const char *key, char *out,
                   size_t outlen)
{
    int n = c->endpoint[0]
                ? snprintf(out, outlen, "%s/%s/", c->endpoint, bucket)
                : snprintf(out, outlen, "https://%s.s3.%s.amazonaws.com/", bucket, c->region);
    if (n < 0 || (size_t)n >= outlen)
        return SLUICE_ERR_TOO_LARGE;
    return key ? obj_encode(key, strlen(key), true, out, outlen) : 0;
}

/* ---- curl handles ------------------------------------------------------------------------ */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static pthread_key_t handle_key;
static int global_rc;
static char global_err[512]; /* why global_rc is not 0 */

/* The libcurl functions used, resolved once by global_init() (typed as curl.h declares them). */
static struct curl_api {
    __typeof__(curl_global_init) *global_init;
    __typeof__(curl_easy_init) *easy_init;
    __typeof__(curl_easy_setopt) *easy_setopt;
    __typeof__(curl_easy_perform) *easy_perform;
    __typeof__(curl_easy_getinfo) *easy_getinfo;
    __typeof__(curl_easy_reset) *easy_reset;
    __typeof__(curl_easy_cleanup) *easy_cleanup;
    __typeof__(curl_easy_strerror) *easy_strerror;
    __typeof__(curl_slist_append) *slist_append;
    __typeof__(curl_slist_free_all) *slist_free_all;
} cu;

static const struct dynlib_fn curl_fns[] = {
    DYNLIB_FN(struct curl_api, global_init, curl_global_init),
    DYNLIB_FN(struct curl_api, easy_init, curl_easy_init),
    DYNLIB_FN(struct curl_api, easy_setopt, curl_easy_setopt),
    DYNLIB_FN(struct curl_api, easy_perform, curl_easy_perform),
    DYNLIB_FN(struct curl_api, easy_getinfo, curl_easy_getinfo),
    DYNLIB_FN(struct curl_api, easy_reset, curl_easy_reset),
    DYNLIB_FN(struct curl_api, easy_cleanup, curl_easy_cleanup),
    DYNLIB_FN(struct curl_api, easy_strerror, curl_easy_strerror),
    DYNLIB_FN(struct curl_api, slist_append, curl_slist_append),
    DYNLIB_FN(struct curl_api, slist_free_all, curl_slist_free_all),
};

static struct dynlib curl_lib = DYNLIB_INIT("libcurl.so.4", "objects over HTTP", curl_fns, &cu);

/* Handles of threads that ended, kept with their connections for the threads to come (an
 * object's read-ahead threads end with it: the next object's reuse the connections, which on
 * real S3 saves a TLS handshake per object and thread). */
#define HANDLE_POOL 16u
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *handles[HANDLE_POOL];
static size_t nhandles;

static void handle_free(void *h)
{
    pthread_mutex_lock(&handles_mu);
    if (nhandles < HANDLE_POOL) {
        handles[nhandles++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&handles_mu);
    if (h)
        cu.easy_cleanup(h);
}

static void global_init(void)
{
    global_rc = dynlib_load(&curl_lib, global_err, sizeof global_err);
    if (global_rc)
        return;
    if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
        pthread_key_create(&handle_key, handle_free) != 0)
        global_rc =
            err_set(global_err, sizeof global_err, SLUICE_ERR_NOMEM, "libcurl: cannot start");
}

/* This thread's handle, reset for a new request; its connection cache survives the reset. */
static CURL *thread_handle(void)
{
    pthread_once(&global_once, global_init);
    if (global_rc)
        return NULL;
    CURL *h = pthread_getspecific(handle_key);
    if (h) {
        cu.easy_reset(h);
        return h;
    }
    pthread_mutex_lock(&handles_mu);
    h = nhandles > 0 ? handles[--nhandles] : NULL;
    pthread_mutex_unlock(&handles_mu);
    if (h)
        cu.easy_reset(h);
    else
        h = cu.easy_init();
    if (h && pthread_setspecific(handle_key, h) != 0) {
        cu.easy_cleanup(h);
        return NULL;
    }
    return h;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- One request, with retries ------------------------------------------------------------ */

/* What a request does: GET an object's bytes or a listing, PUT an object whole, DELETE one. */
enum req_method { M_GET, M_PUT, M_DELETE };

struct req {
    /* In. */
    const struct creds *creds; /* NULL: an unsigned http(s) request */
    const char *url;
    enum req_method method;
    const uint8_t *up; /* M_PUT: the body, up_len bytes, its SHA-256 in up_sha */
    size_t up_len;
    char up_sha[SHA256_HEX_LEN + 1];
    bool ranged; /* fetch [off, off + want); else the whole answer (a listing) */
    uint64_t off;
    size_t want;
    const char *if_match;            /* "" or NULL: none */
    const struct obj_cancel *cancel; /* NULL: never cancelled */
    uint8_t *dst;                    /* ranged: want bytes; else grown in body */
    /* Out. */
    size_t got;    /* bytes received into dst (ranged) or body */
    uint8_t *body; /* unranged: the answer */
    size_t body_cap;
    long status;    /* of the last attempt */
    bool whole;     /* a 200 to a ranged request: the whole object from offset 0 */
    bool end;       /* 416: off lies at or after the end of the object */
    uint64_t total; /* from Content-Range "bytes a-b/TOTAL" (or a 200's length) */
    bool have_total;
    char etag[256]; /* from the last answer with one */
    /* Per attempt. */
    CURL *h;
    uint64_t cr_start; /* Content-Range's first byte */
    bool have_cr;
    bool overflow; /* more bytes than asked for */
    size_t up_pos; /* M_PUT: the next byte of up to send */
    char errbody[ERRBODY_MAX];
    size_t errlen;
};

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    struct req *q = user;
    size_t len = size * n;
    char line[512];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, data, l);
    line[l] = '\0';
    while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == '\n'))
        line[--l] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) {
        /* A new answer (after a redirect, say): forget the last one's headers. */
        q->have_cr = false;
    } else if (strncasecmp(line, "etag:", 5) == 0) {
        copy_str(q->etag, sizeof q->etag, trim(line + 5));
    } else if (strncasecmp(line, "content-range:", 14) == 0) {
        unsigned long long a, b, t;
        if (sscanf(trim(line + 14), "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            q->cr_start = a;
            q->have_cr = true;
            q->total = t;
            q->have_total = true;
        }
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    struct req *q = user;
    size_t len = size * n;
    /* The headers are in before the first byte of the body: the status is known. */
    cu.easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &q->status);
    if (q->status < 200 || q->status > 299) {
        size_t room = sizeof q->errbody - 1 - q->errlen;
        size_t k = len < room ? len : room;
        memcpy(q->errbody + q->errlen, data, k);
        q->errlen += k;
        q->errbody[q->errlen] = '\0';
        return len;
    }
    if (q->method != M_GET)
        return len; /* a PUT's or DELETE's answer says nothing more */
    if (q->ranged) {
        if (len > q->want - q->got) {
            q->overflow = true;
            return 0;
        }
        memcpy(q->dst + q->got, data, len);
        q->got += len;
        atomic_fetch_add_explicit(&stat_bytes, len, memory_order_relaxed);
        return len;
    }
    if (q->got + len > LIST_PAGE_MAX) {
        q->overflow = true;
        return 0;
    }
    if (grow_bytes(&q->body, &q->body_cap, q->got + len + 1, 65536) < 0)
        return 0;
    memcpy(q->body + q->got, data, len);
    q->got += len;
    q->body[q->got] = '\0';
    atomic_fetch_add_explicit(&stat_bytes, len, memory_order_relaxed);
    return len;
}

/* libcurl's read callback of a PUT: the next bytes of the body. */
static size_t on_upload(char *buf, size_t size, size_t n, void *user)
{
    struct req *q = user;
    size_t room = size * n, left = q->up_len - q->up_pos;
    size_t k = left < room ? left : room;
    memcpy(buf, q->up + q->up_pos, k);
    q->up_pos += k;
    atomic_fetch_add_explicit(&stat_bytes_sent, k, memory_order_relaxed);
    return k;
}

/* libcurl's seek callback of a PUT (to send the body again). */
static int on_upload_seek(void *user, curl_off_t off, int origin)
{
    struct req *q = user;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > q->up_len)
        return CURL_SEEKFUNC_CANTSEEK;
    q->up_pos = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

/* Why an attempt ended: done, retry, or fail at once. */
enum outcome { DONE, RETRY, FAIL };

static bool transient_status(long s)
{
    return s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

static bool transient_curl(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

static int status_code(long s)
{
    if (s == 404)
        return SLUICE_ERR_NOT_FOUND;
    if (s == 401 || s == 403)
        return SLUICE_ERR_DENIED;
    if (s == 412)
        return SLUICE_ERR_CORRUPT;
    return transient_status(s) ? SLUICE_ERR_UNAVAILABLE : SLUICE_ERR_PROTOCOL;
}

/* "HTTP 403: CODE: MESSAGE" of the last answer into out. */
static void status_text(const struct req *q, char *out, size_t outlen)
{
    char text[512];
    obj_error_text(q->errbody, q->errlen, text, sizeof text);
    snprintf(out, outlen, "HTTP %ld%s%s", q->status, text[0] ? ": " : "", text);
}

static bool cancelled(const struct obj_cancel *c)
{
    return c && c->cancelled && c->cancelled(c->arg);
}

/* libcurl's progress callback: a cancelled read ends its transfer at once. */
static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return cancelled(((struct req *)user)->cancel) ? 1 : 0;
}

/* Sleeps ms, in slices short enough that a cancelled read stops within CANCEL_SLICE_MS. Returns
 * false when cancelled. */
static bool sleep_unless_cancelled(uint32_t ms, const struct obj_cancel *c)
{
    while (ms > 0) {
        if (cancelled(c))
            return false;
        uint32_t d = ms < CANCEL_SLICE_MS ? ms : CANCEL_SLICE_MS;
        sleep_ms(d);
        ms -= d;
    }
    return !cancelled(c);
}

/* One attempt of q from q->got on. Returns its outcome; why holds the reason when it is not
 * DONE, *code the error code for FAIL. */
static enum outcome attempt(CURL *h, struct req *q, uint64_t deadline, char *why, size_t whylen,
                            int *code)
{
    struct curl_slist *hdrs = NULL;
    char line[4200];
    q->status = 0;
    q->errlen = 0;
    q->errbody[0] = '\0';
    q->have_cr = false;
    q->overflow = false;
    if (q->ranged) {
        snprintf(line, sizeof line, "Range: bytes=%" PRIu64 "-%" PRIu64, q->off + q->got,
                 q->off + q->want - 1);
        hdrs = cu.slist_append(hdrs, line);
    } else {
        q->got = 0;
    }
    q->up_pos = 0; /* a PUT sends its whole body in each attempt */
    if (q->if_match && q->if_match[0]) {
        snprintf(line, sizeof line, "If-Match: %s", q->if_match);
        hdrs = cu.slist_append(hdrs, line);
    }
    const char *ca = getenv("AWS_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("CURL_CA_BUNDLE");
    cu.easy_setopt(h, CURLOPT_URL, q->url);
    cu.easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    cu.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    cu.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    cu.easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    cu.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    cu.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    cu.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, STALL_S);
    uint64_t now = now_ms();
    cu.easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(deadline > now ? deadline - now : 1));
    cu.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    cu.easy_setopt(h, CURLOPT_HEADERDATA, q);
    cu.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    cu.easy_setopt(h, CURLOPT_WRITEDATA, q);
    cu.easy_setopt(h, CURLOPT_USERAGENT, "sluice");
    /* Fewer, larger reads from the socket for a range of megabytes (libcurl's default is 16 KiB,
     * the curl tool's 100 KiB). */
    cu.easy_setopt(h, CURLOPT_BUFFERSIZE, RECV_BUFFER_BYTES);
    if (q->cancel) {
        cu.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        cu.easy_setopt(h, CURLOPT_XFERINFODATA, q);
        cu.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (ca && *ca)
        cu.easy_setopt(h, CURLOPT_CAINFO, ca);
    if (q->method == M_PUT) {
        cu.easy_setopt(h, CURLOPT_UPLOAD, 1L);
        cu.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->up_len);
        cu.easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
        cu.easy_setopt(h, CURLOPT_READDATA, q);
        cu.easy_setopt(h, CURLOPT_SEEKFUNCTION, on_upload_seek);
        cu.easy_setopt(h, CURLOPT_SEEKDATA, q);
        /* The body goes at once: no round trip for "100 Continue". */
        hdrs = cu.slist_append(hdrs, "Expect:");
    } else if (q->method == M_DELETE) {
        cu.easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (q->creds && q->creds->key[0]) {
        char sigv4[128];
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", q->creds->region);
        cu.easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
        cu.easy_setopt(h, CURLOPT_USERNAME, q->creds->key);
        cu.easy_setopt(h, CURLOPT_PASSWORD, q->creds->secret);
        /* A GET or DELETE has no payload: the SHA-256 of nothing; a PUT's is its body's, which
         * the server checks. */
        snprintf(line, sizeof line, "x-amz-content-sha256: %s",
                 q->method == M_PUT
                     ? q->up_sha
                     : "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        hdrs = cu.slist_append(hdrs, line);
        if (q->creds->token[0]) {
            snprintf(line, sizeof line, "x-amz-security-token: %s", q->creds->token);
            hdrs = cu.slist_append(hdrs, line);
        }
    }
    if (!q->creds) {
        /* A plain http(s) URL may redirect (to a CDN, say); a loop ends after a few hops. */
        cu.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        cu.easy_setopt(h, CURLOPT_MAXREDIRS, 8L);
        cu.easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    cu.easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    q->h = h;
    size_t before = q->got;
    CURLcode cc = cu.easy_perform(h);
    cu.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &q->status);
    count_request(q->method == M_PUT      ? OBJ_OP_PUT
                  : q->method == M_DELETE ? OBJ_OP_DELETE
                  : q->ranged             ? OBJ_OP_GET
                                          : OBJ_OP_LIST,
                  q->status);
    cu.easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    cu.slist_free_all(hdrs);
    *code = 0;
    if (q->overflow) {
        if (q->status == 200)
            snprintf(why, whylen,
                     "the server ignores Range requests (HTTP 200 with more than the %zu bytes "
                     "asked for); an object larger than --object-range-bytes cannot be read from "
                     "it",
                     q->want);
        else
            snprintf(why, whylen, "the server sent more bytes than asked for");
        *code = SLUICE_ERR_PROTOCOL;
        return FAIL;
    }
    if (q->status >= 200 && q->status <= 299 && q->ranged) {
        if (q->status == 200 || !q->have_cr) {
            /* The server ignores Range: acceptable only for the whole object from offset 0. */
            if (q->off != 0 || before != 0) {
                snprintf(why, whylen, "the server ignored a Range request (HTTP %ld)", q->status);
                *code = SLUICE_ERR_PROTOCOL;
                return FAIL;
            }
            if (cc == CURLE_OK) {
                q->whole = true;
                q->total = q->got;
                q->have_total = true;
                return DONE;
            }
        } else if (q->cr_start != q->off + before) {
            snprintf(why, whylen, "the server answered bytes from %" PRIu64 ", asked for %" PRIu64,
                     q->cr_start, q->off + before);
            *code = SLUICE_ERR_PROTOCOL;
            return FAIL;
        }
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(why, whylen, "cancelled");
        *code = SLUICE_ERR_CANCELLED;
        return FAIL;
    }
    if (cc != CURLE_OK) {
        /* The body callback stops a transfer on a full list page or out of memory. */
        if (cc == CURLE_WRITE_ERROR) {
            snprintf(why, whylen, "%s",
                     q->got + 1 > LIST_PAGE_MAX ? "answer too large" : "out of memory");
            *code = SLUICE_ERR_NOMEM;
            return FAIL;
        }
        snprintf(why, whylen, "%s", cu.easy_strerror(cc));
        if (transient_curl(cc))
            return RETRY;
        *code = cc == CURLE_TOO_MANY_REDIRECTS ? SLUICE_ERR_PROTOCOL : SLUICE_ERR_UNAVAILABLE;
        return FAIL;
    }
    if (q->status == 416 && q->ranged) {
        q->end = true;
        return DONE;
    }
    if (q->status < 200 || q->status > 299) {
        status_text(q, why, whylen);
        if (transient_status(q->status))
            return RETRY;
        *code = status_code(q->status);
        return FAIL;
    }
    if (q->ranged && q->got < q->want && q->have_total && q->off + q->got < q->total) {
        snprintf(why, whylen, "the answer ended after %zu of its bytes", q->got - before);
        return RETRY;
    }
    return DONE;
}

/* Runs q to completion, retrying transient failures until the deadline. Returns 0 or a negative
 * code with the reason in err. */
static int fetch(struct req *q, char *err, size_t errlen)
{
    CURL *h = thread_handle();
    if (!h && global_rc)
        return err_set(err, errlen, global_rc, "%s", global_err);
    if (!h)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "libcurl: cannot make a handle");
    uint32_t retry_ms = retry_ms_setting();
    uint64_t start = now_ms(), deadline = start + retry_ms;
    uint64_t rnd = start ^ (uint64_t)(uintptr_t)q ^ ((uint64_t)(uintptr_t)h << 17);
    char why[600];
    for (uint32_t n = 0;; n++) {
        int code = 0;
        enum outcome o = attempt(h, q, deadline, why, sizeof why, &code);
        if (o == DONE)
            return 0;
        if (o == FAIL)
            return err_set(err, errlen, code, "%s", why);
        uint32_t delay = backoff_delay(n, BACKOFF_BASE_MS, BACKOFF_MAX_MS, backoff_random(&rnd));
        uint64_t now = now_ms();
        if (now + delay >= deadline)
            return err_set(err, errlen,
                           q->status && transient_status(q->status) ? SLUICE_ERR_UNAVAILABLE
                                                                    : SLUICE_ERR_TIMEOUT,
                           "%s (gave up after %u attempts in %" PRIu64 " ms)", why, n + 1,
                           now - start);
        if (!sleep_unless_cancelled(delay, q->cancel))
            return err_set(err, errlen, SLUICE_ERR_CANCELLED, "cancelled");
    }
}

/* ---- Readers ----------------------------------------------------------------------------- */

struct obj_reader {
    char *url;     /* as the source names it */
    char *req_url; /* the request URL */
    bool s3;
    struct creds creds;
    struct obj_cancel cancel; /* cancelled NULL: never */
    size_t range;             /* bytes per GET */
    char etag[256];           /* from the first answer; "" when the server sends none */
    uint64_t size;
    /* buf[0, len) holds the object's bytes from buf_off; pos is the next one to hand out. */
    uint8_t *buf;
    size_t len, pos, cap; /* cap: range, or less for obj_open_random */
    uint64_t buf_off;
    /* obj_pread's windows: win[i].buf[0, len) holds the bytes from off; used orders them. */
    struct {
        uint8_t *buf;
        size_t len;
        uint64_t off, used;
    } win[PREAD_WINDOWS];
    uint64_t tick;
    /* The read-ahead (obj_read): AHEAD_SLOTS threads of the reader's own each fetch one of the
     * ranges after buf's while buf is consumed, so that two GETs are in flight. mu guards the
     * slots' state; ahead_next is the first offset neither in buf nor asked of a slot. */
    int ahead_threads; /* slots started (0: no read-ahead yet, or none could start) */
    bool ahead_failed; /* a thread could not start: no more are tried */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ahead_quit;
    _Atomic bool ahead_stop; /* ends the slots' requests at once (obj_close) */
    uint64_t ahead_next;
    struct obj_cancel ahead_cancel; /* the reader's cancel, or ahead_stop */
    struct ahead {
        struct obj_reader *r;
        pthread_t th;
        bool pending; /* [off, off + want) is asked for and not yet answered */
        bool ready;   /* it is answered: rc, got, end, why */
        uint64_t off;
        size_t want, got;
        bool end;
        int rc;
        uint8_t *buf; /* cap bytes */
        char why[1024];
    } ahead[AHEAD_SLOTS];
};

const char *obj_url(const struct obj_reader *r)
{
    return r->url;
}

const char *obj_etag(const struct obj_reader *r)
{
    return r->etag;
}

uint64_t obj_size(const struct obj_reader *r)
{
    return r->size;
}

void obj_close(struct obj_reader *r)
{
    if (!r)
        return;
    if (r->ahead_threads > 0) {
        pthread_mutex_lock(&r->mu);
        r->ahead_quit = true;
        atomic_store(&r->ahead_stop, true);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < r->ahead_threads; i++)
            pthread_join(r->ahead[i].th, NULL);
    }
    if (r->ahead_threads > 0 || r->ahead_failed) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    for (int i = 0; i < AHEAD_SLOTS; i++)
        buf_put(r->ahead[i].buf, r->cap);
    free(r->url);
    free(r->req_url);
    buf_put(r->buf, r->cap);
    for (size_t i = 0; i < PREAD_WINDOWS; i++)
        free(r->win[i].buf);
    /* The secret must not linger in freed memory. */
    memset(&r->creds, 0, sizeof r->creds);
    free(r);
}

static void req_init(struct req *q, struct obj_reader *r, uint64_t off, size_t want, void *dst)
{
    memset(q, 0, sizeof *q);
    q->creds = r->s3 ? &r->creds : NULL;
    q->url = r->req_url;
    q->ranged = true;
    q->off = off;
    q->want = want;
    q->dst = dst;
    q->if_match = r->etag;
    q->cancel = &r->cancel;
}

/* Fetches the range at off into r->buf. */
static int fill(struct obj_reader *r, uint64_t off, char *err, size_t errlen)
{
    struct req q;
    size_t want = r->cap;
    if (r->size && off < r->size && r->size - off < want)
        want = (size_t)(r->size - off);
    char why[1024];
    req_init(&q, r, off, want, r->buf);
    int rc = fetch(&q, why, sizeof why);
    if (rc == SLUICE_ERR_CORRUPT)
        return err_set(err, errlen, rc, "changed while being read (ETag %s at open): %s", r->etag,
                       why);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", why);
    r->buf_off = off;
    r->len = q.end ? 0 : q.got;
    r->pos = 0;
    return 0;
}

/* ---- Read-ahead ---------------------------------------------------------------------------- */

static bool ahead_cancelled(const void *arg)
{
    const struct obj_reader *r = arg;
    return atomic_load(&r->ahead_stop) || cancelled(&r->cancel);
}

/* A read-ahead thread: fetches each range its slot is asked for, until told to quit. */
static void *ahead_main(void *arg)
{
    struct ahead *a = arg;
    struct obj_reader *r = a->r;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!a->pending && !r->ahead_quit)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->ahead_quit)
            break;
        uint64_t off = a->off;
        size_t want = a->want;
        pthread_mutex_unlock(&r->mu);
        struct req q;
        char why[sizeof a->why];
        why[0] = '\0';
        req_init(&q, r, off, want, a->buf);
        q.cancel = &r->ahead_cancel;
        int rc = fetch(&q, why, sizeof why);
        pthread_mutex_lock(&r->mu);
        a->rc = rc;
        a->got = q.got;
        a->end = q.end;
        memcpy(a->why, why, sizeof why);
        a->pending = false;
        a->ready = true;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Starts the slots' threads, the first time. Returns how many run (0: reads stay one at a
 * time). */
static int ahead_start(struct obj_reader *r)
{
    if (r->ahead_threads > 0 || r->ahead_failed)
        return r->ahead_threads;
    r->ahead_cancel.cancelled = ahead_cancelled;
    r->ahead_cancel.arg = r;
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return 0;
    if (pthread_cond_init(&r->cv, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        return 0;
    }
    r->ahead_failed = true; /* until a thread runs: obj_close then destroys mu and cv */
    for (int i = 0; i < AHEAD_SLOTS; i++) {
        struct ahead *a = &r->ahead[i];
        a->r = r;
        if (!(a->buf = buf_get(r->cap)) || pthread_create(&a->th, NULL, ahead_main, a) != 0)
            break;
        r->ahead_threads++;
    }
    r->ahead_failed = r->ahead_threads < AHEAD_SLOTS;
    return r->ahead_threads;
}

/* Asks each idle slot for the next range not yet asked for, while the object goes on. */
static void ahead_ask(struct obj_reader *r)
{
    if (r->ahead_next < r->buf_off + r->len)
        r->ahead_next = r->buf_off + r->len;
    if (r->ahead_next >= r->size || r->cap != r->range || ahead_start(r) == 0)
        return;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->ahead_threads && r->ahead_next < r->size; i++) {
        struct ahead *a = &r->ahead[i];
        if (a->pending || a->ready)
            continue;
        a->off = r->ahead_next;
        a->want = r->size - a->off < r->cap ? (size_t)(r->size - a->off) : r->cap;
        a->pending = true;
        r->ahead_next += a->want;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Takes the range at off from the slot asked for it into buf once it is answered (buf and the
 * slot's buffer trade places). Returns 1 when taken, 0 when no slot holds off (the caller fetches
 * it), or the slot's error. */
static int ahead_take(struct obj_reader *r, uint64_t off, char *err, size_t errlen)
{
    if (r->ahead_threads == 0)
        return 0;
    pthread_mutex_lock(&r->mu);
    struct ahead *a = NULL;
    for (int i = 0; !a && i < r->ahead_threads; i++)
        if ((r->ahead[i].pending || r->ahead[i].ready) && r->ahead[i].off == off)
            a = &r->ahead[i];
    if (!a) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    while (!a->ready)
        pthread_cond_wait(&r->cv, &r->mu);
    a->ready = false;
    int rc = a->rc;
    pthread_mutex_unlock(&r->mu);
    if (rc == SLUICE_ERR_CORRUPT)
        return err_set(err, errlen, rc, "changed while being read (ETag %s at open): %s", r->etag,
                       a->why);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", a->why);
    uint8_t *b = r->buf;
    r->buf = a->buf;
    a->buf = b;
    r->buf_off = off;
    r->len = a->end ? 0 : a->got;
    r->pos = 0;
    return 1;
}

/* obj_open and obj_open_random: the first request asks for first bytes (0: one range). */
static int open_reader(const char *url, const struct obj_cancel *cancel, size_t first,
                       struct obj_reader **out, char *err, size_t errlen)
{
    *out = NULL;
    char why[1024];
    struct obj_pin pin;
    obj_pin_parse(url, &pin);
    struct obj_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->url = strndup(url, pin.url_len))) {
        free(r);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", url);
    }
    int rc = obj_url_check(r->url, err, errlen);
    if (rc < 0) {
        obj_close(r);
        return rc;
    }
    url = r->url;
    if (cancel)
        r->cancel = *cancel;
    if (pin.pinned)
        copy_str(r->etag, sizeof r->etag, pin.etag);
    r->range = range_setting();
    r->s3 = obj_url_scheme(url) == OBJ_S3;
    char req_url[8192];
    if (r->s3) {
        struct obj_s3_url u;
        creds_load(&r->creds);
        rc = obj_s3_url_parse(url, &u);
        if (rc == 0) {
            req_url[0] = '\0';
            rc = s3_base(&r->creds, u.bucket, u.key, req_url, sizeof req_url);
            obj_s3_url_free(&u);
        }
    } else {
        copy_str(req_url, sizeof req_url, url);
    }
    if (rc == 0 && !(r->req_url = strdup(req_url)))
        rc = SLUICE_ERR_NOMEM;
    r->cap = first && first < r->range ? first : r->range;
    if (rc == 0 && !(r->buf = buf_get(r->cap)))
        rc = SLUICE_ERR_NOMEM;
    if (rc < 0) {
        rc = err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
        obj_close(r);
        return rc;
    }
    /* A listed object's size is known: the ranges after the first are asked for at once. */
    if (pin.pinned && pin.etag[0] && r->cap == r->range) {
        r->size = pin.size;
        r->ahead_next = r->cap;
        ahead_ask(r);
    }
    struct req q;
    req_init(&q, r, 0, r->cap, r->buf);
    rc = fetch(&q, why, sizeof why);
    if (rc == SLUICE_ERR_CORRUPT && pin.pinned) {
        rc = err_set(err, errlen, rc, "%s: changed since it was listed (ETag %s then): %s", url,
                     r->etag, why);
        obj_close(r);
        return rc;
    }
    if (rc < 0) {
        rc = err_set(err, errlen, rc, "%s: %s", url, why);
        obj_close(r);
        return rc;
    }
    if (!pin.pinned || !r->etag[0])
        copy_str(r->etag, sizeof r->etag, q.etag);
    r->len = q.end ? 0 : q.got;
    r->size = q.end ? 0 : q.have_total ? q.total : q.got;
    if (pin.pinned && r->size != pin.size) {
        rc = err_set(err, errlen, SLUICE_ERR_CORRUPT,
                     "%s: changed since it was listed (%" PRIu64 " bytes then, %" PRIu64 " now)",
                     url, pin.size, r->size);
        obj_close(r);
        return rc;
    }
    /* The second range is on its way while the first is consumed. */
    ahead_ask(r);
    *out = r;
    return 0;
}

int obj_open(const char *url, const struct obj_cancel *cancel, struct obj_reader **out, char *err,
             size_t errlen)
{
    return open_reader(url, cancel, 0, out, err, errlen);
}

int obj_open_random(const char *url, const struct obj_cancel *cancel, struct obj_reader **out,
                    char *err, size_t errlen)
{
    return open_reader(url, cancel, OBJ_MIN_RANGE_BYTES, out, err, errlen);
}

ssize_t obj_read(struct obj_reader *r, void *dst, size_t len, char *err, size_t errlen)
{
    if (r->pos == r->len) {
        uint64_t next = r->buf_off + r->len;
        if (next >= r->size || len == 0)
            return 0;
        int rc = ahead_take(r, next, err, errlen);
        if (rc == 0)
            rc = fill(r, next, err, errlen);
        if (rc < 0)
            return rc;
        if (r->len == 0)
            return err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                           "the object ended at %" PRIu64 " of its %" PRIu64 " bytes", next,
                           r->size);
        ahead_ask(r);
    }
    size_t n = r->len - r->pos;
    if (n > len)
        n = len;
    memcpy(dst, r->buf + r->pos, n);
    r->pos += n;
    return (ssize_t)n;
}

/* Fetches len bytes at off into dst, straight from the server. */
static int get_range(struct obj_reader *r, void *dst, size_t len, uint64_t off, char *err,
                     size_t errlen)
{
    struct req q;
    char why[1024];
    req_init(&q, r, off, len, dst);
    int rc = fetch(&q, why, sizeof why);
    if (rc == SLUICE_ERR_CORRUPT)
        return err_set(err, errlen, rc, "changed while being read (ETag %s at open): %s", r->etag,
                       why);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", why);
    if (q.got != len)
        return err_set(err, errlen, SLUICE_ERR_TRUNCATED, "the object ended early");
    return 0;
}

/* Copies what the buffer or a window holds of [off, off + len) from off on into dst. Returns
 * the count (0: neither holds byte off). */
static size_t from_cache(struct obj_reader *r, uint8_t *dst, size_t len, uint64_t off)
{
    const uint8_t *src = NULL;
    size_t have = 0;
    if (off >= r->buf_off && off < r->buf_off + r->len) {
        src = r->buf + (off - r->buf_off);
        have = (size_t)(r->buf_off + r->len - off);
    }
    for (size_t i = 0; !src && i < PREAD_WINDOWS; i++)
        if (r->win[i].len && off >= r->win[i].off && off < r->win[i].off + r->win[i].len) {
            src = r->win[i].buf + (off - r->win[i].off);
            have = (size_t)(r->win[i].off + r->win[i].len - off);
            r->win[i].used = ++r->tick;
        }
    if (!src)
        return 0;
    size_t n = have < len ? have : len;
    memcpy(dst, src, n);
    return n;
}

int obj_pread(struct obj_reader *r, void *dst, size_t len, uint64_t off, char *err, size_t errlen)
{
    if (off > r->size || r->size - off < len)
        return err_set(err, errlen, SLUICE_ERR_TRUNCATED,
                       "%zu bytes at offset %" PRIu64 " lie beyond the object's %" PRIu64, len, off,
                       r->size);
    size_t wsize = r->range < PREAD_WINDOW_MAX ? r->range : PREAD_WINDOW_MAX;
    uint8_t *p = dst;
    while (len > 0) {
        size_t n = from_cache(r, p, len, off);
        if (n > 0) {
            p += n;
            off += n;
            len -= n;
            continue;
        }
        if (len >= wsize)
            return get_range(r, p, len, off, err, errlen);
        /* The least recently used window takes the window around off, ending at the object's
         * end when it would run past it (a footer and the bytes before it come in one). */
        size_t k = 0;
        for (size_t i = 1; i < PREAD_WINDOWS; i++)
            if (r->win[i].used < r->win[k].used)
                k = i;
        if (!r->win[k].buf && !(r->win[k].buf = malloc(wsize)))
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        uint64_t start = off;
        if (r->size - start < wsize)
            start = r->size > wsize ? r->size - wsize : 0;
        size_t wlen = r->size - start < wsize ? (size_t)(r->size - start) : wsize;
        r->win[k].len = 0;
        int rc = get_range(r, r->win[k].buf, wlen, start, err, errlen);
        if (rc < 0)
            return rc;
        r->win[k].off = start;
        r->win[k].len = wlen;
        r->win[k].used = ++r->tick;
    }
    return 0;
}

/* ---- Listing ----------------------------------------------------------------------------- */

static int append_url(char ***urls, size_t *n, size_t *cap, const char *bucket,
                      const struct obj_entry *e)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        char **nu = realloc(*urls, ncap * sizeof *nu);
        if (!nu)
            return SLUICE_ERR_NOMEM;
        *urls = nu;
        *cap = ncap;
    }
    char *url = NULL;
    if (asprintf(&url, "s3://%s/%s", bucket, e->key) < 0)
        return SLUICE_ERR_NOMEM;
    int rc = obj_pin_format(url, e->size, e->etag, &(*urls)[*n]);
    free(url);
    if (rc < 0)
        return rc;
    (*n)++;
    return 0;
}

int obj_glob(const char *url, char ***urls, size_t *n, size_t *cap, char *err, size_t errlen)
{
    int rc = obj_url_check(url, err, errlen);
    if (rc < 0)
        return rc;
    if (obj_url_scheme(url) != OBJ_S3)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: only s3:// URLs are listed", url);
    struct obj_s3_url u;
    if ((rc = obj_s3_url_parse(url, &u)) < 0)
        return err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
    struct creds *c = calloc(1, sizeof *c);
    char *base = malloc(8192), *req_url = malloc(16384);
    char *token = NULL, why[1024];
    struct obj_entry *entries = NULL;
    size_t nentries = 0, ecap = 0;
    int added = 0;
    if (!c || !base || !req_url) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", url);
        goto out;
    }
    creds_load(c);
    base[0] = '\0';
    size_t plen = obj_glob_prefix_len(u.key);
    if ((rc = s3_base(c, u.bucket, NULL, base, 8192)) < 0) {
        rc = err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
        goto out;
    }
    /* One walk: the pages of ListObjectsV2 over the literal prefix, its query in the canonical
     * (sorted) order that the signature covers. */
    do {
        struct req q = {.creds = c, .url = req_url};
        snprintf(req_url, 16384, "%s?", base);
        if (token) {
            strcat(req_url, "continuation-token=");
            rc = obj_encode(token, strlen(token), false, req_url, 16384);
            strcat(req_url, "&");
        }
        strcat(req_url, "list-type=2&prefix=");
        if (rc == 0)
            rc = obj_encode(u.key, plen, false, req_url, 16384);
        if (rc < 0) {
            rc = err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
            goto out;
        }
        rc = fetch(&q, why, sizeof why);
        free(token);
        token = NULL;
        if (rc == 0) {
            size_t first = nentries;
            rc = obj_list_parse((const char *)q.body, q.got, &entries, &nentries, &ecap, &token,
                                why, sizeof why);
            for (size_t i = first; rc == 0 && i < nentries; i++) {
                if (fnmatch(u.key, entries[i].key, FNM_PATHNAME) != 0)
                    continue;
                if ((rc = append_url(urls, n, cap, u.bucket, &entries[i])) < 0)
                    snprintf(why, sizeof why, "out of memory");
                else
                    added++;
            }
        }
        free(q.body);
        if (rc < 0) {
            rc = err_set(err, errlen, rc, "%s: %s", url, why);
            goto out;
        }
        obj_entries_free(entries, nentries);
        entries = NULL;
        nentries = ecap = 0;
    } while (token);
    rc = added;
out:
    obj_entries_free(entries, nentries);
    free(token);
    free(base);
    free(req_url);
    if (c)
        memset(c, 0, sizeof *c);
    free(c);
    obj_s3_url_free(&u);
    return rc;
}

/* ---- Writing ----------------------------------------------------------------------------- */

/* One PUT (data, len) or DELETE (data NULL) of the s3:// object url, retried as a GET is. */
static int write_request(const char *url, enum req_method method, const void *data, size_t len,
                         char *err, size_t errlen)
{
    int rc = obj_url_check(url, err, errlen);
    if (rc < 0)
        return rc;
    if (obj_url_scheme(url) != OBJ_S3)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: only s3:// objects are written", url);
    struct obj_s3_url u;
    if ((rc = obj_s3_url_parse(url, &u)) < 0)
        return err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
    if (!u.key[0]) {
        obj_s3_url_free(&u);
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: names no object (no key)", url);
    }
    struct creds *c = calloc(1, sizeof *c);
    char *req_url = malloc(8192);
    if (!c || !req_url) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s: out of memory", url);
        goto out;
    }
    creds_load(c);
    req_url[0] = '\0';
    if ((rc = s3_base(c, u.bucket, u.key, req_url, 8192)) < 0) {
        rc = err_set(err, errlen, rc, "%s: %s", url, sluice_strerror(rc));
        goto out;
    }
    struct req q = {.creds = c, .url = req_url, .method = method, .up = data, .up_len = len};
    if (method == M_PUT)
        sha256_hex(data, len, q.up_sha);
    char why[1024];
    rc = fetch(&q, why, sizeof why);
    free(q.body);
    if (rc < 0)
        rc = err_set(err, errlen, rc, "%s: %s", url, why);
out:
    free(req_url);
    if (c)
        memset(c, 0, sizeof *c);
    free(c);
    obj_s3_url_free(&u);
    return rc;
}

int obj_put(const char *url, const void *data, size_t len, char *err, size_t errlen)
{
    static const uint8_t nothing[1];
    return write_request(url, M_PUT, data ? data : nothing, len, err, errlen);
}

int obj_delete(const char *url, char *err, size_t errlen)
{
    return write_request(url, M_DELETE, NULL, 0, err, errlen);
}

/* ---- a stdio stream over an object (obj_fopen) ---- */

struct obj_file {
    struct obj_reader *r;
    uint64_t pos;          /* the stream's position */
    uint64_t next;         /* the reader's: the next byte obj_read gives */
    struct obj_fail *fail; /* the caller's, which outlives the stream */
};

static ssize_t objf_read(void *cookie, char *buf, size_t size)
{
    struct obj_file *o = cookie;
    struct obj_fail *fail = o->fail;
    if (fail->code) {
        errno = EIO;
        return -1;
    }
    uint64_t total = obj_size(o->r);
    if (o->pos >= total || size == 0)
        return 0;
    if (o->pos != o->next) {
        size_t n = total - o->pos < size ? (size_t)(total - o->pos) : size;
        int rc = obj_pread(o->r, buf, n, o->pos, fail->why, sizeof fail->why);
        if (rc < 0) {
            fail->code = rc;
            fail->at = o->pos;
            errno = EIO;
            return -1;
        }
        o->pos += n;
        return (ssize_t)n;
    }
    ssize_t n = obj_read(o->r, buf, size, fail->why, sizeof fail->why);
    if (n < 0) {
        fail->code = (int)n;
        fail->at = o->pos;
        errno = EIO;
        return -1;
    }
    o->pos += (uint64_t)n;
    o->next += (uint64_t)n;
    return n;
}

static int objf_seek(void *cookie, off64_t *offset, int whence)
{
    struct obj_file *o = cookie;
    int64_t base = whence == SEEK_SET   ? 0
                   : whence == SEEK_CUR ? (int64_t)o->pos
                   : whence == SEEK_END ? (int64_t)obj_size(o->r)
                                        : -1;
    if (base < 0 || (*offset < 0 && -*offset > base)) {
        errno = EINVAL;
        return -1;
    }
    o->pos = (uint64_t)(base + *offset);
    *offset = (off64_t)o->pos;
    return 0;
}

static int objf_close(void *cookie)
{
    struct obj_file *o = cookie;
    obj_close(o->r);
    free(o);
    return 0;
}

FILE *obj_fopen(struct obj_reader *r, struct obj_fail *fail)
{
    memset(fail, 0, sizeof *fail);
    struct obj_file *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->r = r;
    o->fail = fail;
    FILE *f = fopencookie(o, "rb", (cookie_io_functions_t){objf_read, NULL, objf_seek, objf_close});
    if (!f)
        free(o);
    return f;
}
