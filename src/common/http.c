/* The metrics HTTP server of http.h.
 *
 * Happy path: the listening socket is bound and listening before any libuv handle exists, so a
 * failed start leaves nothing to close. A connection reads into its fixed request buffer until
 * the head parses, writes one response in one uv_write (head and body as two buffers), shuts
 * down its sending side, then reads and discards until the peer closes. That last step matters:
 * closing a socket that still has unread input makes the kernel send a reset, which can destroy
 * a response the peer has not read yet (a 431 sent while the peer is still sending, say).
 *
 * States of a connection, each bounded by its timer:
 *   READING    collecting the head; the timer answers 408 when it fires
 *   WAITING    the head is answered later (http_defer); input is discarded; the timer answers
 *              503 when it fires, and the reply given afterwards is dropped
 *   WRITING    response queued; input is discarded; the timer closes the connection
 *   LINGERING  response written and FIN sent; input is discarded until end of stream; the timer
 *              closes the connection
 *   CLOSING    uv_close called on both handles; the conn is freed when both callbacks have run
 *
 * Lifetimes: a conn holds two handles (its socket and its timer) and is freed in the second
 * close callback. The server counts its listener and every allocated connection in handles and
 * is freed, after its close callback, when that count reaches zero. */
#include "http.h"
#include "listen.h"

#include "auth.h"
#include "error.h"
#include "log.h"
#include "security.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the request parser ---------------------------------------------------------------------- */

static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* Finds the end of the head: the byte after CRLF CRLF. A LF without a CR before it is invalid
 * wherever it appears, so no line can be read two ways. */
static int find_head_end(const char *buf, size_t len, size_t *end)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i == 0 || buf[i - 1] != '\r')
            return SLUICE_ERR_INVALID;
        if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
            *end = i + 1;
            return 0;
        }
    }
    return SLUICE_ERR_TRUNCATED;
}

/* Splits the request target into its path: origin form "/p?q", absolute form
 * "http://authority/p?q" (the path is "/" when empty), or the asterisk form "*". */
static int parse_target(const char *t, size_t n, struct http_request *req)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] == '#')
            return SLUICE_ERR_INVALID;
    const char *p = t;
    const char *end = t + n;
    if (n == 1 && t[0] == '*') {
        req->path = t;
        req->path_len = 1;
        return 0;
    }
    if (t[0] != '/') {
        size_t skip;
        if (n >= 7 && strncasecmp(t, "http://", 7) == 0)
            skip = 7;
        else if (n >= 8 && strncasecmp(t, "https://", 8) == 0)
            skip = 8;
        else
            return SLUICE_ERR_INVALID;
        p = t + skip;
        while (p < end && *p != '/' && *p != '?')
            p++;
        if (p == t + skip)
            return SLUICE_ERR_INVALID; /* no authority */
        if (p == end || *p == '?') {
            req->path = "/";
            req->path_len = 1;
            return 0;
        }
    }
    const char *q = memchr(p, '?', (size_t)(end - p));
    req->path = p;
    req->path_len = (size_t)((q ? q : end) - p);
    return 0;
}

/* Parses "METHOD SP TARGET SP HTTP/d.d" filling req; returns the major version in *major. */
static int parse_request_line(const char *line, size_t n, struct http_request *req, int *major)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ' ')
        return SLUICE_ERR_INVALID;
    req->method = line;
    req->method_len = i;
    size_t t = ++i;
    while (i < n && (unsigned char)line[i] > 0x20 && (unsigned char)line[i] < 0x7f)
        i++;
    if (i == t || i == n || line[i] != ' ')
        return SLUICE_ERR_INVALID;
    int rc = parse_target(line + t, i - t, req);
    if (rc != 0)
        return rc;
    const char *v = line + i + 1;
    if (n - i - 1 != 8 || memcmp(v, "HTTP/", 5) != 0 || !is_digit((unsigned char)v[5]) ||
        v[6] != '.' || !is_digit((unsigned char)v[7]))
        return SLUICE_ERR_INVALID;
    *major = v[5] - '0';
    req->minor = v[7] - '0';
    return 0;
}

/* Checks one "name: value" line (without its CRLF); counts Host fields and keeps the value of
 * the Authorization field (without the white space around it) in req, counting those too. */
static int parse_field(const char *line, size_t n, unsigned *hosts, unsigned *auths,
                       struct http_request *req)
{
    size_t i = 0;
    /* A line starting with white space would be an obsolete folded continuation: rejected, as
     * is any white space between the name and the colon. */
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ':')
        return SLUICE_ERR_INVALID;
    if (i == 4 && strncasecmp(line, "host", 4) == 0)
        (*hosts)++;
    for (size_t j = i + 1; j < n; j++) {
        unsigned char c = (unsigned char)line[j];
        if (c < 0x20 ? c != '\t' : c == 0x7f)
            return SLUICE_ERR_INVALID;
    }
    if (i == 13 && strncasecmp(line, "authorization", 13) == 0) {
        size_t b = i + 1, e = n;
        while (b < e && (line[b] == ' ' || line[b] == '\t'))
            b++;
        while (e > b && (line[e - 1] == ' ' || line[e - 1] == '\t'))
            e--;
        req->authorization = line + b;
        req->authorization_len = e - b;
        (*auths)++;
    }
    return 0;
}

int http_parse_request(const char *buf, size_t len, struct http_request *req)
{
    size_t end = 0;
    int rc = find_head_end(buf, len, &end);
    if (rc != 0)
        return rc;
    /* Every LF in buf[0..end) follows a CR, so lines split cleanly at "\r\n". */
    const char *p = buf;
    const char *stop = buf + end;
    const char *nl = memchr(p, '\n', (size_t)(stop - p));
    struct http_request r = {0};
    int major = 0;
    rc = parse_request_line(p, (size_t)(nl - 1 - p), &r, &major);
    if (rc != 0)
        return rc;
    unsigned hosts = 0, auths = 0;
    for (p = nl + 1;; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(stop - p));
        size_t n = (size_t)(nl - 1 - p);
        if (n == 0)
            break; /* the empty line */
        rc = parse_field(p, n, &hosts, &auths, &r);
        if (rc != 0)
            return rc;
    }
    if (major != 1)
        return SLUICE_ERR_UNSUPPORTED;
    if (hosts > 1 || (hosts == 0 && r.minor >= 1) || auths > 1)
        return SLUICE_ERR_INVALID;
    r.head_len = end;
    *req = r;
    return 0;
}

/* ---- the server ------------------------------------------------------------------------------ */

enum conn_state { READING, WAITING, WRITING, LINGERING, CLOSING };

/* A response given later (http_defer): c is NULL once its connection is gone. */
struct http_reply {
    struct http_conn *c;
    bool page; /* answers a page (its headers go with it), else GET /metrics */
};

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t write_req;
    uv_shutdown_t shutdown_req;
    struct http_server *srv;
    struct http_conn *prev, *next; /* in srv->conns while not CLOSING */
    enum conn_state state;
    unsigned handles; /* open handles: 2 until closing, then counts down */
    bool peer_done;   /* the peer has closed its sending side */
    uint64_t timeout_ms;
    struct http_reply *reply; /* WAITING: the deferred reply */
    const char *body;         /* response body being written */
    bool body_owned;          /* body is malloc'd and freed once written */
    size_t len;               /* bytes in req */
    char head[1024];          /* response head being written */
    char text[48];            /* the body of an error response: "STATUS REASON\n" */
    char req[HTTP_MAX_REQUEST];
};

struct http_server {
    uv_tcp_t listener;
    uv_loop_t *loop;
    http_render_cb render;
    void *user;
    uint64_t timeout_ms;
    const uint8_t *token; /* NULL, or what "Authorization: Bearer" must carry (borrowed) */
    size_t token_len;
    uint64_t unauthorized; /* 401 responses */
    http_ready_cb ready;   /* GET /readyz; NULL: always ready */
    void *ready_user;
    struct http_pages pages; /* find NULL: none */
    unsigned max_conns;
    unsigned nconns;           /* connections in srv->conns */
    unsigned handles;          /* the listener, every conn and the spare while they are open */
    struct http_conn *conns;   /* open connections, newest first */
    struct http_conn *serving; /* during a render or serve call: its connection (http_defer) */
    unsigned pool_answers;     /* http_answer_from_pool: produced on the pool now */
    bool serving_page;
    int port;
    bool closing;
    /* A connection that cannot be served (over the limit, or out of memory) is accepted into the
     * spare handle and closed at once: libuv stops watching the listener until a pending
     * connection is accepted, so refusing one must not depend on an allocation. */
    struct listen_spare spare;
    void (*close_cb)(void *user);
    void *close_user;
    char scratch[4096]; /* where discarded input goes; read callbacks finish with it at once */
};

static void server_release(struct http_server *srv)
{
    assert(srv->handles > 0);
    if (--srv->handles > 0)
        return;
    if (srv->close_cb)
        srv->close_cb(srv->close_user);
    free(srv);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    struct http_conn *c = h->data;
    if (--c->handles > 0)
        return;
    struct http_server *srv = c->srv;
    if (c->body_owned)
        free((char *)c->body);
    free(c);
    server_release(srv);
}

static void conn_close(struct http_conn *c)
{
    if (c->state == CLOSING)
        return;
    c->state = CLOSING;
    if (c->reply) {
        c->reply->c = NULL; /* its owner's http_reply_send frees it */
        c->reply = NULL;
    }
    struct http_server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_timeout(uv_timer_t *t);

/* Starts (or restarts) the connection's timer for another full timeout. */
static void conn_arm(struct http_conn *c)
{
    uv_timer_start(&c->timer, on_timeout, c->timeout_ms, 0);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct http_conn *c = req->data;
    if (c->state == CLOSING)
        return;
    if (status < 0 || c->peer_done) {
        conn_close(c);
        return;
    }
    c->state = LINGERING;
    conn_arm(c);
}

static void on_written(uv_write_t *req, int status)
{
    struct http_conn *c = req->data;
    if (c->body_owned)
        free((char *)c->body);
    c->body = NULL;
    c->body_owned = false;
    if (c->state == CLOSING)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
        conn_close(c);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 401:
        return "Unauthorized";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    }
    return "Error";
}

/* Sends the one response of this connection: its head in c->head and body[0..body_len) (owned
 * tells whether the server frees body once written). extra is header lines, each ending in CRLF
 * ("" for none). */
static void conn_send(struct http_conn *c, int status, const char *content_type, const char *extra,
                      const char *body, size_t body_len, bool owned)
{
    assert(c->state == READING || c->state == WAITING);
    c->state = WRITING;
    c->body = body;
    c->body_owned = owned;
    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\n"
                     "%s"
                     "Content-Type: %s\r\n"
                     "Content-Length: %zu\r\n"
                     "Connection: close\r\n"
                     "\r\n",
                     status, reason_phrase(status), extra, content_type, body_len);
    assert(n > 0 && (size_t)n < sizeof c->head);
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)n),
                        uv_buf_init((char *)c->body, (unsigned)body_len)};
    c->write_req.data = c;
    conn_arm(c);
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, bufs, body_len ? 2 : 1, on_written) != 0)
        conn_close(c);
}

/* Sends the one response of this connection. For a 200, body (owned, may be NULL) is the body;
 * any other status carries its status line text as body ("STATUS REASON\n") unless body is given.
 * page says whether it answers a dashboard page (its security headers go with it). */
static void conn_respond_page(struct http_conn *c, int status, char *body, size_t body_len,
                              bool page)
{
    static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";
    static const char text_type[] = "text/plain; charset=utf-8";
    if (status == 200 || body) {
        conn_send(c, status, !page ? metrics_type : text_type, page ? HTTP_PAGE_HEADERS : "", body,
                  body ? body_len : 0, true);
        return;
    }
    int n = snprintf(c->text, sizeof c->text, "%d %s\n", status, reason_phrase(status));
    assert(n > 0 && (size_t)n < sizeof c->text);
    char extra[sizeof HTTP_PAGE_HEADERS + 64];
    snprintf(extra, sizeof extra, "%s%s",
             status == 405   ? "Allow: GET\r\n"
             : status == 401 ? "WWW-Authenticate: Bearer realm=\"sluice\"\r\n"
                             : "",
             page ? HTTP_PAGE_HEADERS : "");
    conn_send(c, status, text_type, extra, c->text, (size_t)n, false);
}

static void conn_respond(struct http_conn *c, int status, char *body, size_t body_len)
{
    conn_respond_page(c, status, body, body_len, false);
}

static bool token_is(const char *s, size_t n, const char *want)
{
    return n == strlen(want) && memcmp(s, want, n) == 0;
}

/* True when the request carries "Authorization: Bearer TOKEN" with the server's token, or the
 * server has none. The token is compared in constant time. */
static bool authorized(const struct http_server *srv, const struct http_request *req)
{
    if (srv->token == NULL)
        return true;
    const char *v = req->authorization;
    size_t n = req->authorization_len;
    if (v == NULL || n < 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    n -= 7;
    while (n > 0 && *v == ' ') {
        v++;
        n--;
    }
    return auth_equal(v, n, srv->token, srv->token_len);
}

/* GET /healthz and /readyz, for probes: no token needed, they tell nothing but the state. */
static void conn_probe(struct http_conn *c, const struct http_request *req, bool ready_probe)
{
    if (!token_is(req->method, req->method_len, "GET")) {
        conn_respond(c, 405, NULL, 0);
        return;
    }
    char why[SLUICE_ERRMSG_SIZE] = "";
    bool ok = !ready_probe || !c->srv->ready || c->srv->ready(c->srv->ready_user, why, sizeof why);
    char *body = malloc(sizeof why + 16);
    if (!body) {
        conn_respond(c, 500, NULL, 0);
        return;
    }
    int n = ok ? snprintf(body, sizeof why + 16, "%s\n", ready_probe ? "ready" : "ok")
               : snprintf(body, sizeof why + 16, "not ready: %s\n", why);
    conn_respond(c, ok ? 200 : 503, body, (size_t)n);
}

/* A path of the pages (http_server_set_pages), or 404: the token checked for a private one, then
 * the method. */
static void conn_page(struct http_conn *c, const struct http_request *req)
{
    const struct http_pages *p = &c->srv->pages;
    enum http_access access = p->find ? p->find(p->user, req->path, req->path_len) : HTTP_PAGE_NONE;
    if (access == HTTP_PAGE_NONE) {
        conn_respond(c, 404, NULL, 0);
        return;
    }
    if (access == HTTP_PAGE_PRIVATE && !authorized(c->srv, req)) {
        c->srv->unauthorized++;
        conn_respond_page(c, 401, NULL, 0, true);
        return;
    }
    if (!token_is(req->method, req->method_len, "GET")) {
        conn_respond_page(c, 405, NULL, 0, true);
        return;
    }
    struct http_response res = {0};
    c->srv->serving = c;
    c->srv->serving_page = true;
    int rc = p->serve(p->user, req->path, req->path_len, &res);
    c->srv->serving = NULL;
    /* Deferred: answered meanwhile or later (a callback that did not call http_defer leaves the
     * connection reading: a 500). */
    if (rc == HTTP_DEFERRED && c->state != READING)
        return;
    if (rc != 0) {
        log_warn("metrics: serving a page failed: %s", sluice_strerror(rc));
        conn_respond_page(c, 500, NULL, 0, true);
        return;
    }
    assert(res.content_type != NULL);
    conn_send(c, 200, res.content_type, HTTP_PAGE_HEADERS, res.body, res.body ? res.len : 0,
              res.owned);
}

/* Answers a complete, well-formed request. */
static void conn_route(struct http_conn *c, const struct http_request *req)
{
    if (token_is(req->path, req->path_len, "/healthz") ||
        token_is(req->path, req->path_len, "/readyz")) {
        conn_probe(c, req, token_is(req->path, req->path_len, "/readyz"));
        return;
    }
    if (!token_is(req->path, req->path_len, "/metrics")) {
        conn_page(c, req);
        return;
    }
    if (!authorized(c->srv, req)) {
        c->srv->unauthorized++;
        conn_respond(c, 401, NULL, 0);
        return;
    }
    if (!token_is(req->method, req->method_len, "GET")) {
        conn_respond(c, 405, NULL, 0);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    c->srv->serving = c;
    c->srv->serving_page = false;
    int rc = c->srv->render(c->srv->user, &body, &len);
    c->srv->serving = NULL;
    /* Deferred: answered meanwhile or later (a callback that did not call http_defer leaves the
     * connection reading: a 500). */
    if (rc == HTTP_DEFERRED && c->state != READING)
        return;
    if (rc != 0) {
        log_warn("metrics: rendering failed: %s", sluice_strerror(rc));
        conn_respond(c, 500, NULL, 0);
        return;
    }
    if (body == NULL)
        len = 0;
    conn_respond(c, 200, body, len);
}

/* Called after new bytes arrived in c->req; fresh is how many. */
static void conn_parse(struct http_conn *c, size_t fresh)
{
    /* The head can only have become complete (or broken, by a bare LF) if a LF arrived now. */
    if (memchr(c->req + c->len - fresh, '\n', fresh) != NULL) {
        struct http_request req;
        int rc = http_parse_request(c->req, c->len, &req);
        if (rc == 0) {
            conn_route(c, &req);
            return;
        }
        if (rc == SLUICE_ERR_INVALID) {
            conn_respond(c, 400, NULL, 0);
            return;
        }
        if (rc == SLUICE_ERR_UNSUPPORTED) {
            conn_respond(c, 505, NULL, 0);
            return;
        }
        assert(rc == SLUICE_ERR_TRUNCATED);
    }
    if (c->len == sizeof c->req)
        conn_respond(c, 431, NULL, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = h->data;
    /* While reading the head, the free part of the request buffer is never empty: a full buffer
     * is answered (431) before the next read. */
    if (c->state == READING)
        *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof c->req - c->len));
    else
        *buf = uv_buf_init(c->srv->scratch, sizeof c->srv->scratch);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = stream->data;
    if (nread == 0 || c->state == CLOSING)
        return;
    if (nread < 0) {
        /* Before a response there is nobody to answer; while writing, the peer may only have
         * closed its sending side, so the response still goes out; afterwards we are done. */
        if ((c->state == WRITING || c->state == WAITING) && nread == UV_EOF) {
            c->peer_done = true;
            uv_read_stop(stream);
            return;
        }
        conn_close(c);
        return;
    }
    if (c->state != READING)
        return; /* discarded */
    c->len += (size_t)nread;
    conn_parse(c, (size_t)nread);
}

static void on_timeout(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    if (c->state == READING) {
        conn_respond(c, 408, NULL, 0);
    } else if (c->state == WAITING) {
        bool page = c->reply->page;
        c->reply->c = NULL;
        c->reply = NULL;
        conn_respond_page(c, 503, NULL, 0, page);
    } else {
        conn_close(c);
    }
}

struct http_reply *http_defer(struct http_server *srv)
{
    struct http_conn *c = srv->serving;
    assert(c != NULL && c->state == READING && c->reply == NULL);
    struct http_reply *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    *r = (struct http_reply){c, srv->serving_page};
    c->reply = r;
    c->state = WAITING;
    conn_arm(c);
    return r;
}

void http_reply_send(struct http_reply *r, int rc, const struct http_response *res)
{
    struct http_conn *c = r->c;
    bool owned = rc == 0 && res && res->owned;
    if (!c) {
        if (owned)
            free((char *)res->body);
        free(r);
        return;
    }
    assert(c->state == WAITING && c->reply == r);
    c->reply = NULL;
    bool page = r->page;
    free(r);
    if (rc != 0) {
        log_warn("metrics: %s failed: %s", page ? "serving a page" : "rendering",
                 sluice_strerror(rc));
        conn_respond_page(c, 500, NULL, 0, page);
        return;
    }
    size_t len = res->body ? res->len : 0;
    if (page)
        conn_send(c, 200, res->content_type, HTTP_PAGE_HEADERS, res->body, len, res->owned);
    else
        conn_respond(c, 200, (char *)res->body, len);
}

struct pool_answer {
    uv_work_t work;
    struct http_server *srv; /* held (srv->handles) until the answer is given */
    struct http_reply *reply;
    int (*produce)(void *arg, struct http_response *res);
    void (*release)(void *arg);
    void *arg;
    struct http_response res;
    int rc;
};

static void pool_produce(uv_work_t *w)
{
    struct pool_answer *a = w->data;
    a->rc = a->produce(a->arg, &a->res);
}

static void pool_answered(uv_work_t *w, int status)
{
    struct pool_answer *a = w->data;
    if (status < 0 && a->rc == 0) {
        a->rc = SLUICE_ERR_CANCELLED; /* never ran */
    }
    http_reply_send(a->reply, a->rc, &a->res);
    if (a->release)
        a->release(a->arg);
    struct http_server *srv = a->srv;
    free(a);
    if (srv) {
        srv->pool_answers--;
        server_release(srv);
    }
}

int http_answer_from_pool(struct http_server *srv,
                          int (*produce)(void *arg, struct http_response *res),
                          void (*release)(void *arg), void *arg)
{
    struct pool_answer *a = calloc(1, sizeof *a);
    struct http_reply *r = a ? http_defer(srv) : NULL;
    if (!r) {
        free(a);
        if (release)
            release(arg);
        return SLUICE_ERR_NOMEM;
    }
    *a = (struct pool_answer){
        .reply = r, .produce = produce, .release = release, .arg = arg, .rc = 0};
    a->work.data = a;
    /* At most HTTP_POOL_ANSWERS in flight: beyond that (a flood of scrapes) each is answered on
     * the loop as before, so the copies held and the pool's threads taken stay bounded. */
    if (srv->pool_answers < HTTP_POOL_ANSWERS &&
        uv_queue_work(srv->loop, &a->work, pool_produce, pool_answered) == 0) {
        a->srv = srv;
        srv->pool_answers++;
        srv->handles++;
        return HTTP_DEFERRED;
    }
    a->rc = produce(arg, &a->res);
    pool_answered(&a->work, 0);
    return HTTP_DEFERRED;
}

static void on_connection(uv_stream_t *listener, int status);

static void on_spare_closed(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    /* The listener is still open unless the server is closing. */
    if (listen_spare_closed(&srv->spare, !srv->closing))
        on_connection((uv_stream_t *)&srv->listener, 0);
    server_release(srv);
}

/* Accepts the pending connection into the spare handle and closes it straight away. */
static void refuse(struct http_server *srv)
{
    if (listen_spare_refuse(&srv->spare, srv->loop, (uv_stream_t *)&srv->listener, srv,
                            on_spare_closed))
        srv->handles++;
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct http_server *srv = (struct http_server *)listener; /* listener is the first member */
    if (status < 0) {
        log_warn("metrics: accept: %s", uv_strerror(status));
        return;
    }
    if (srv->nconns >= srv->max_conns) {
        refuse(srv);
        return;
    }
    struct http_conn *c = malloc(sizeof *c);
    if (c == NULL) {
        log_warn("metrics: accept: out of memory");
        refuse(srv);
        return;
    }
    memset(c, 0, offsetof(struct http_conn, req));
    c->srv = srv;
    c->timeout_ms = srv->timeout_ms;
    if (uv_tcp_init(srv->loop, &c->tcp) != 0) {
        free(c);
        refuse(srv);
        return;
    }
    /* From here on the conn is freed only through its close callbacks. */
    uv_timer_init(srv->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles = 2;
    c->state = READING;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    srv->handles++;
    int rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        log_warn("metrics: accept: %s", uv_strerror(rc));
        conn_close(c);
        return;
    }
    conn_arm(c);
}

/* ---- starting and closing -------------------------------------------------------------------- */

static void on_listener_closed(uv_handle_t *h)
{
    server_release((struct http_server *)h);
}

int http_server_start(uv_loop_t *loop, const char *host, int port, http_render_cb render,
                      void *user, struct http_server **out, char *err, size_t errlen)
{
    assert(render != NULL);
    if (host == NULL)
        host = "127.0.0.1";
    char addr[300];
    if (strchr(host, ':'))
        snprintf(addr, sizeof addr, "[%s]:%d", host, port);
    else
        snprintf(addr, sizeof addr, "%s:%d", host, port);
    if (port < 0 || port > 65535)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "listen on %s: port out of range", addr);

    char why[SLUICE_ERRMSG_SIZE];
    int fd = -1, bound = 0;
    int rc = listen_open(host, port, &fd, &bound, why, sizeof why);
    if (rc != 0)
        goto fail;
    struct http_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL) {
        rc = err_set(why, sizeof why, SLUICE_ERR_NOMEM, "out of memory");
        goto fail_fd;
    }
    srv->loop = loop;
    srv->render = render;
    srv->user = user;
    srv->timeout_ms = HTTP_DEFAULT_TIMEOUT_MS;
    srv->max_conns = HTTP_DEFAULT_MAX_CONNECTIONS;
    srv->port = bound;
    srv->handles = 1;
    int inited;
    rc = listen_adopt(loop, &srv->listener, fd, on_connection, &inited);
    if (rc != 0 && !inited) {
        free(srv);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    if (rc != 0) {
        /* The handle exists now and can only go away through the loop. */
        srv->closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
        return err_set(err, errlen, rc, "listen on %s: %s", addr, uv_strerror(rc));
    }
    *out = srv;
    return 0;

fail_fd:
    close(fd);
fail:
    return err_set(err, errlen, rc, "listen on %s: %s", addr, why);
}

int http_server_port(const struct http_server *srv)
{
    return srv->port;
}

void http_server_set_timeout(struct http_server *srv, uint64_t timeout_ms)
{
    srv->timeout_ms = timeout_ms ? timeout_ms : HTTP_DEFAULT_TIMEOUT_MS;
}

void http_server_set_token(struct http_server *srv, const uint8_t *token, size_t len)
{
    srv->token = len ? token : NULL;
    srv->token_len = token ? len : 0;
}

uint64_t http_server_unauthorized(const struct http_server *srv)
{
    return srv->unauthorized;
}

void http_server_set_max_connections(struct http_server *srv, unsigned max)
{
    srv->max_conns = max ? max : HTTP_DEFAULT_MAX_CONNECTIONS;
}

void http_server_close(struct http_server *srv, void (*cb)(void *user), void *user)
{
    assert(!srv->closing);
    srv->closing = true;
    srv->close_cb = cb;
    srv->close_user = user;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    while (srv->conns)
        conn_close(srv->conns);
}

/* ---- the metrics server of an embedded dispatcher or worker -------------------------------- */

int http_metrics_host(const struct security_ctx *sec, const char *host, char **out, char *err,
                      size_t errlen)
{
    *out = strdup(host ? host : "127.0.0.1");
    if (!*out)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "start: %s",
                       sluice_strerror(SLUICE_ERR_NOMEM));
    char why[SLUICE_ERRMSG_SIZE];
    int rc = security_check_listen(sec, *out, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc, "metrics: %s", why);
    return 0;
}

int http_metrics_start(uv_loop_t *loop, const char *host, int port, http_render_cb render,
                       void *user, const struct security_ctx *sec, struct http_server **out,
                       char *err, size_t errlen)
{
    char why[SLUICE_ERRMSG_SIZE];
    int rc = http_server_start(loop, host, port, render, user, out, why, sizeof why);
    if (rc < 0)
        return err_set(err, errlen, rc, "metrics: %s", why);
    if (security_has_token(sec))
        http_server_set_token(*out, sec->token, sec->token_len);
    return 0;
}

void http_server_set_pages(struct http_server *srv, const struct http_pages *pages)
{
    srv->pages = pages ? *pages : (struct http_pages){0};
}

void http_server_set_ready(struct http_server *srv, http_ready_cb ready, void *user)
{
    srv->ready = ready;
    srv->ready_user = user;
}
