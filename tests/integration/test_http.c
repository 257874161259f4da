/* The metrics HTTP server over real sockets on 127.0.0.1: the server runs on a libuv loop in a
 * thread of its own and the test talks to it with plain blocking sockets, comparing whole
 * responses byte for byte: 200 with the rendered registry, 404, 405, 400 for many malformed
 * requests, 505, 431 at exactly one byte over the limit and for a flood, 408 for a silent or
 * trickling peer, 500 when rendering fails, the connection limit, a peer that never closes,
 * a thousand sequential scrapes, start errors, and pages (http_server_set_pages) with their
 * headers, their token and exact paths. Every test ends with the server closed and
 * uv_loop_close() == 0. The pure request parser is checked table-driven at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdatomic.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "lib/loop.h"

#include "common/error.h"
#include "common/http.h"
#include "common/metrics.h"

/* Bound of every blocking read: a test that hangs fails instead. */
#define RECV_TIMEOUT_MS 10000

/* ---- the server on its own thread ------------------------------------------------------------ */

struct server {
    /* Configuration, set before the thread starts. */
    uint64_t timeout_ms; /* 0: the default */
    unsigned max_conns;  /* 0: the default */
    bool fail_render;
    bool pages;           /* serve the test pages below, behind the token "tok" */
    unsigned defer_ms;    /* answer /metrics and /api/doc that much later, from a thread */
    atomic_int not_ready; /* GET /readyz answers 503 while set */

    /* Owned by the server thread. */
    uv_thread_t thread;
    uv_loop_t loop;
    uv_async_t stop;
    struct http_server *srv;
    struct metrics *reg;
    struct metrics_series *scrapes;

    /* Published to the test thread under mu. */
    uv_mutex_t mu;
    uv_cond_t cv;
    bool ready, done;
    bool stopped; /* test thread only: the stop was sent and the thread joined */
    int port;
    int start_rc;
    char err[SLUICE_ERRMSG_SIZE];
    bool close_cb_ran;
    int loop_close_rc;
};

/* A deferred answer: the registry frozen at the request, rendered on libuv's thread pool once
 * the timer fires, answered from the work's completion on the loop. */
struct later {
    uv_timer_t timer;
    uv_work_t work;
    struct server *s;
    struct http_reply *reply;
    struct metrics_frozen *frozen;
    char *body;
    size_t len;
    int rc;
};

static void on_later_closed(uv_handle_t *h)
{
    free(h->data);
}

static void later_render(uv_work_t *w)
{
    struct later *l = w->data;
    l->rc = metrics_frozen_render(l->frozen, &l->body, &l->len);
}

static void later_done(uv_work_t *w, int status)
{
    struct later *l = w->data;
    struct http_response res = {NULL, l->body, l->len, true};
    http_reply_send(l->reply, status < 0 ? SLUICE_ERR_CANCELLED : l->rc, &res);
    if (status < 0 || l->rc < 0)
        free(l->body);
    metrics_frozen_free(l->frozen);
    uv_close((uv_handle_t *)&l->timer, on_later_closed);
}

static void on_later(uv_timer_t *t)
{
    struct later *l = t->data;
    l->work.data = l;
    assert_int_equal(uv_queue_work(&l->s->loop, &l->work, later_render, later_done), 0);
}

/* Defers the answer of the request being served by s->defer_ms: the registry as it is now. */
static int answer_later(struct server *s)
{
    struct later *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->s = s;
    assert_int_equal(metrics_freeze(s->reg, &l->frozen), 0);
    l->reply = http_defer(s->srv);
    assert_non_null(l->reply);
    uv_timer_init(&s->loop, &l->timer);
    l->timer.data = l;
    uv_timer_start(&l->timer, on_later, s->defer_ms, 0);
    return HTTP_DEFERRED;
}

static int render(void *user, char **body, size_t *len)
{
    struct server *s = user;
    if (s->fail_render)
        return SLUICE_ERR_NOMEM;
    metrics_add_u64(s->scrapes, 1);
    if (s->defer_ms)
        return answer_later(s);
    return metrics_render(s->reg, body, len);
}

static void on_server_closed(void *user)
{
    ((struct server *)user)->close_cb_ran = true;
}

static void on_stop(uv_async_t *a)
{
    struct server *s = a->data;
    http_server_close(s->srv, on_server_closed, s);
    uv_close((uv_handle_t *)&s->stop, NULL);
}

static void build_registry(struct server *s)
{
    struct metrics_family *scrapes, *info;
    assert_int_equal(metrics_create(&s->reg), 0);
    assert_int_equal(
        metrics_counter(s->reg, "test_scrapes_total", "Scrapes so far.", METRICS_U64, &scrapes), 0);
    assert_int_equal(metrics_series_get(scrapes, NULL, 0, &s->scrapes), 0);
    assert_int_equal(metrics_gauge(s->reg, "test_info", "Escapes.", METRICS_DOUBLE, &info), 0);
    struct metrics_label l = {"quote", "a\"b"};
    struct metrics_series *i;
    assert_int_equal(metrics_series_get(info, &l, 1, &i), 0);
    metrics_set_double(i, 0.5);
}

static bool probe_ready(void *user, char *why, size_t whylen)
{
    struct server *s = user;
    if (atomic_load(&s->not_ready)) {
        snprintf(why, whylen, "journal not recovered");
        return false;
    }
    return true;
}

/* The test pages: "/" public and static, "/api/doc" private and allocated, "/api/fail" private
 * and failing. */
static enum http_access page_find(void *user, const char *path, size_t len)
{
    (void)user;
    if (len == 1 && path[0] == '/')
        return HTTP_PAGE_PUBLIC;
    if ((len == 8 && memcmp(path, "/api/doc", 8) == 0) ||
        (len == 9 && memcmp(path, "/api/fail", 9) == 0))
        return HTTP_PAGE_PRIVATE;
    return HTTP_PAGE_NONE;
}

/* The deferred page: its text written on libuv's pool (http_answer_from_pool). */
static int page_produce(void *arg, struct http_response *res)
{
    char *body = strdup(arg);
    if (!body)
        return SLUICE_ERR_NOMEM;
    *res = (struct http_response){"application/json", body, strlen(body), true};
    return 0;
}

static void page_release(void *arg)
{
    free(arg);
}

static int page_serve(void *user, const char *path, size_t len, struct http_response *res)
{
    if (len == 1) {
        *res = (struct http_response){"text/html; charset=utf-8", "<p>hi</p>", 9, false};
        return 0;
    }
    if (len == 9)
        return SLUICE_ERR_NOMEM;
    (void)path;
    struct server *s = user;
    if (s->defer_ms)
        return http_answer_from_pool(s->srv, page_produce, page_release, strdup("{\"n\":2}"));
    char *body = strdup("{\"n\":1}");
    assert_non_null(body);
    *res = (struct http_response){"application/json", body, strlen(body), true};
    return 0;
}

static const uint8_t page_token[] = "tok";

static void server_main(void *arg)
{
    struct server *s = arg;
    uv_loop_init(&s->loop);
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->stop.data = s;
    build_registry(s);
    int rc = http_server_start(&s->loop, "127.0.0.1", 0, render, s, &s->srv, s->err, sizeof s->err);
    if (rc == 0) {
        http_server_set_timeout(s->srv, s->timeout_ms);
        http_server_set_max_connections(s->srv, s->max_conns);
        http_server_set_ready(s->srv, probe_ready, s);
        if (s->pages) {
            http_server_set_pages(s->srv, &(struct http_pages){page_find, page_serve, s});
            http_server_set_token(s->srv, page_token, 3);
        }
    }
    uv_mutex_lock(&s->mu);
    s->start_rc = rc;
    s->port = rc == 0 ? http_server_port(s->srv) : -1;
    s->ready = true;
    uv_cond_signal(&s->cv);
    uv_mutex_unlock(&s->mu);
    if (rc != 0)
        uv_close((uv_handle_t *)&s->stop, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&s->loop);
    metrics_destroy(s->reg);
    uv_mutex_lock(&s->mu);
    s->loop_close_rc = rc;
    s->done = true;
    uv_mutex_unlock(&s->mu);
}

static int server_setup(void **state)
{
    struct server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    if (*state)
        *s = *(const struct server *)*state; /* the configuration of this test */
    uv_mutex_init(&s->mu);
    uv_cond_init(&s->cv);
    uv_thread_create(&s->thread, server_main, s);
    uv_mutex_lock(&s->mu);
    while (!s->ready)
        uv_cond_wait(&s->cv, &s->mu);
    uv_mutex_unlock(&s->mu);
    if (s->start_rc != 0) {
        fprintf(stderr, "server start: %s\n", s->err);
        uv_thread_join(&s->thread);
        return -1;
    }
    *state = s;
    return 0;
}

/* Closes the server and waits for its thread; idempotent. */
static void server_stop(struct server *s)
{
    if (s->stopped)
        return;
    s->stopped = true;
    uv_async_send(&s->stop);
    uv_thread_join(&s->thread);
}

static int server_teardown(void **state)
{
    struct server *s = *state;
    server_stop(s);
    int ok = s->done && s->close_cb_ran && s->loop_close_rc == 0;
    if (!ok)
        fprintf(stderr, "teardown: done %d, close callback %d, uv_loop_close %d\n", s->done,
                s->close_cb_ran, s->loop_close_rc);
    uv_cond_destroy(&s->cv);
    uv_mutex_destroy(&s->mu);
    free(s);
    return ok ? 0 : -1;
}

/* ---- a blocking client ----------------------------------------------------------------------- */

static int client_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {RECV_TIMEOUT_MS / 1000, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            fail_msg("send: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

/* Reads until the server closes; returns the bytes as a NUL-terminated string. A reset counts
 * as a close. */
static char *read_to_close(int fd, size_t *len_out)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r > 0) {
            len += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg("no close from the server within %d ms", RECV_TIMEOUT_MS);
        break; /* 0: end of stream; ECONNRESET: reset */
    }
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
}

/* One request on a fresh connection; the whole response. */
static char *exchange(int port, const char *req, size_t len)
{
    int fd = client_connect(port);
    send_all(fd, req, len);
    char *resp = read_to_close(fd, NULL);
    close(fd);
    return resp;
}

static void assert_text(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fail_msg("got:\n%s\nwant:\n%s", got, want);
}

static void assert_exchange(int port, const char *req, const char *want)
{
    char *resp = exchange(port, req, strlen(req));
    assert_text(resp, want);
    free(resp);
}

/* The exact error response for status. */
static const char *error_response(int status)
{
    switch (status) {
    case 400:
        return "HTTP/1.1 400 Bad Request\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 16\r\n"
               "Connection: close\r\n"
               "\r\n"
               "400 Bad Request\n";
    case 404:
        return "HTTP/1.1 404 Not Found\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 14\r\n"
               "Connection: close\r\n"
               "\r\n"
               "404 Not Found\n";
    case 405:
        return "HTTP/1.1 405 Method Not Allowed\r\n"
               "Allow: GET\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 23\r\n"
               "Connection: close\r\n"
               "\r\n"
               "405 Method Not Allowed\n";
    case 408:
        return "HTTP/1.1 408 Request Timeout\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 20\r\n"
               "Connection: close\r\n"
               "\r\n"
               "408 Request Timeout\n";
    case 431:
        return "HTTP/1.1 431 Request Header Fields Too Large\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 36\r\n"
               "Connection: close\r\n"
               "\r\n"
               "431 Request Header Fields Too Large\n";
    case 500:
        return "HTTP/1.1 500 Internal Server Error\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 26\r\n"
               "Connection: close\r\n"
               "\r\n"
               "500 Internal Server Error\n";
    case 505:
        return "HTTP/1.1 505 HTTP Version Not Supported\r\n"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 31\r\n"
               "Connection: close\r\n"
               "\r\n"
               "505 HTTP Version Not Supported\n";
    }
    fail_msg("no error response for %d", status);
    return NULL;
}

/* The exact 200 response of scrape number n. */
static void ok_response(char *out, size_t cap, unsigned n)
{
    char body[512];
    int blen = snprintf(body, sizeof body,
                        "# HELP test_scrapes_total Scrapes so far.\n"
                        "# TYPE test_scrapes_total counter\n"
                        "test_scrapes_total %u\n"
                        "# HELP test_info Escapes.\n"
                        "# TYPE test_info gauge\n"
                        "test_info{quote=\"a\\\"b\"} 0.5\n",
                        n);
    snprintf(out, cap,
             "HTTP/1.1 200 OK\r\n"
             "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
             "Content-Length: %d\r\n"
             "Connection: close\r\n"
             "\r\n"
             "%s",
             blen, body);
}

static const char *const SCRAPE = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";

static void assert_scrape(int port, const char *req, unsigned n)
{
    char want[1024];
    ok_response(want, sizeof want, n);
    assert_exchange(port, req, want);
}

static double ms_since(uint64_t start_ns)
{
    return (double)(uv_hrtime() - start_ns) / 1e6;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_scrape(void **state)
{
    struct server *s = *state;
    assert_scrape(s->port, SCRAPE, 1);
    assert_scrape(s->port, SCRAPE, 2);
    /* A query string, the absolute form, HTTP/1.0 without Host, more header fields, odd but
     * legal spacing in a field value. */
    assert_scrape(s->port, "GET /metrics?name[]=x HTTP/1.1\r\nHost: h\r\n\r\n", 3);
    assert_scrape(s->port, "GET http://127.0.0.1:9/metrics HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n",
                  4);
    assert_scrape(s->port, "GET /metrics HTTP/1.0\r\n\r\n", 5);
    assert_scrape(s->port,
                  "GET /metrics HTTP/1.1\r\n"
                  "User-Agent: Prometheus/2.45.0\r\n"
                  "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n"
                  "Accept-Encoding: gzip\r\n"
                  "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
                  "HOST:localhost\r\n"
                  "X-Empty:\r\n"
                  "X-Tabs: \t a \t b \t\r\n"
                  "X-Obs: caf\xc3\xa9\r\n"
                  "\r\n",
                  6);

    /* A silent connection does not hold the others up. */
    int idle = client_connect(s->port);
    assert_scrape(s->port, SCRAPE, 7);
    /* A request split into single bytes, and one followed by a second request, which is not
     * answered (one response per connection). */
    int fd = client_connect(s->port);
    for (const char *p = SCRAPE; *p; p++) {
        send_all(fd, p, 1);
        usleep(1000);
    }
    char *resp = read_to_close(fd, NULL);
    close(fd);
    char want[1024];
    ok_response(want, sizeof want, 8);
    assert_text(resp, want);
    free(resp);
    char two[256];
    snprintf(two, sizeof two, "%s%s", SCRAPE, SCRAPE);
    assert_scrape(s->port, two, 9);
    /* A peer that shuts down its sending side right after the request still gets the answer. */
    fd = client_connect(s->port);
    send_all(fd, SCRAPE, strlen(SCRAPE));
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    resp = read_to_close(fd, NULL);
    close(fd);
    ok_response(want, sizeof want, 10);
    assert_text(resp, want);
    free(resp);
    close(idle);
}

static void test_not_found_and_method(void **state)
{
    struct server *s = *state;
    static const char *const not_found[] = {
        "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metricsx HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics/ HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /Metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /%6detrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET //metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET http://h HTTP/1.1\r\nHost: h\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
        "POST /other HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
    };
    for (size_t i = 0; i < sizeof not_found / sizeof not_found[0]; i++)
        assert_exchange(s->port, not_found[i], error_response(404));
    static const char *const not_allowed[] = {
        "POST /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
        "HEAD /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "PUT /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "DELETE /metrics?x HTTP/1.1\r\nHost: h\r\n\r\n",
        "get /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GETS /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof not_allowed / sizeof not_allowed[0]; i++)
        assert_exchange(s->port, not_allowed[i], error_response(405));
    /* None of those rendered. */
    assert_scrape(s->port, SCRAPE, 1);
}

/* The probes: /healthz always, /readyz as the ready callback says; neither renders metrics. */
static void test_probes(void **state)
{
    struct server *s = *state;
    static const char head[] = "HTTP/1.1 %d %s\r\n"
                               "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                               "Content-Length: %zu\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "%s";
    char want[512];
    snprintf(want, sizeof want, head, 200, "OK", strlen("ok\n"), "ok\n");
    assert_exchange(s->port, "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", want);
    snprintf(want, sizeof want, head, 200, "OK", strlen("ready\n"), "ready\n");
    assert_exchange(s->port, "GET /readyz HTTP/1.1\r\nHost: h\r\n\r\n", want);
    atomic_store(&s->not_ready, 1);
    const char *body = "not ready: journal not recovered\n";
    snprintf(want, sizeof want, head, 503, "Service Unavailable", strlen(body), body);
    assert_exchange(s->port, "GET /readyz HTTP/1.1\r\nHost: h\r\n\r\n", want);
    snprintf(want, sizeof want, head, 200, "OK", strlen("ok\n"), "ok\n");
    assert_exchange(s->port, "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n", want);
    assert_exchange(s->port, "POST /readyz HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
                    error_response(405));
    assert_exchange(s->port, "GET /readyz/ HTTP/1.1\r\nHost: h\r\n\r\n", error_response(404));
    /* None of those rendered the metrics. */
    assert_scrape(s->port, SCRAPE, 1);
}

static void test_bad_requests(void **state)
{
    struct server *s = *state;
    static const char *const bad[] = {
        "GARBAGE\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics  HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics HTTP/1.1 \r\nHost: h\r\n\r\n",
        " GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "\r\nGET /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics HTTP/1.1\nHost: h\n\n",
        "GET /metrics HTTP/1.1\r\nHost: h\n\r\n",
        "GET /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost : h\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  folded\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nX-A: a\x01\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nX-A: a\x7f\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\n: empty name\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nNo colon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: h\r\nX(A): 1\r\n\r\n",
        "GET /metrics HTTP/1.10\r\nHost: h\r\n\r\n",
        "GET /metrics HTTP/11\r\nHost: h\r\n\r\n",
        "GET /metrics http/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics HTTP/1.x\r\nHost: h\r\n\r\n",
        "GET metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /metrics#top HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /m\x80trics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET ftp://h/metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET http:///metrics HTTP/1.1\r\nHost: h\r\n\r\n",
        "G(T /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_exchange(s->port, bad[i], error_response(400));
    /* A NUL in the request line. */
    static const char nul[] = "GET /me\0trics HTTP/1.1\r\nHost: h\r\n\r\n";
    char *resp = exchange(s->port, nul, sizeof nul - 1);
    assert_text(resp, error_response(400));
    free(resp);
    /* A bare LF is answered at once, without waiting for the end of the head. */
    uint64_t start = uv_hrtime();
    int fd = client_connect(s->port);
    send_all(fd, "GET /metrics HTTP/1.1\n", 22);
    resp = read_to_close(fd, NULL);
    close(fd);
    assert_text(resp, error_response(400));
    free(resp);
    assert_true(ms_since(start) < 1000);

    assert_exchange(s->port, "GET /metrics HTTP/2.0\r\nHost: h\r\n\r\n", error_response(505));
    assert_exchange(s->port, "GET /metrics HTTP/0.9\r\n\r\n", error_response(505));
    assert_scrape(s->port, SCRAPE, 1);
}

/* A head of exactly HTTP_MAX_REQUEST bytes: "GET /metrics HTTP/1.1\r\nHost: h\r\nX-Pad:
 * aaa\r\n\r\n" with the padding sized to fit. */
static char *padded_request(size_t total)
{
    const char *prefix = "GET /metrics HTTP/1.1\r\nHost: h\r\nX-Pad: ";
    const char *suffix = "\r\n\r\n";
    size_t fixed = strlen(prefix) + strlen(suffix);
    assert_true(total > fixed);
    char *req = malloc(total + 1);
    assert_non_null(req);
    strcpy(req, prefix);
    memset(req + strlen(prefix), 'a', total - fixed);
    strcpy(req + total - strlen(suffix), suffix);
    assert_int_equal(strlen(req), total);
    return req;
}

static void test_request_size(void **state)
{
    struct server *s = *state;
    char *fits = padded_request(HTTP_MAX_REQUEST);
    assert_scrape(s->port, fits, 1);
    free(fits);
    char *over = padded_request(HTTP_MAX_REQUEST + 1);
    assert_exchange(s->port, over, error_response(431));
    free(over);
    /* A megabyte without a line end: answered 431 at 8 KiB, the rest read and dropped, so the
     * answer survives even though the peer was still sending when it was written. */
    size_t big = 1 << 20;
    char *flood = malloc(big);
    assert_non_null(flood);
    memset(flood, 'x', big);
    char *resp = exchange(s->port, flood, big);
    assert_text(resp, error_response(431));
    free(resp);
    free(flood);
    assert_scrape(s->port, SCRAPE, 2);
}

static struct server timeout_config = {.timeout_ms = 300};

static void test_timeouts(void **state)
{
    struct server *s = *state;
    /* Silent peer: 408 after the timeout, then the close. */
    uint64_t start = uv_hrtime();
    int fd = client_connect(s->port);
    char *resp = read_to_close(fd, NULL);
    double ms = ms_since(start);
    close(fd);
    assert_text(resp, error_response(408));
    free(resp);
    if (ms < 250 || ms > 3000)
        fail_msg("silent peer answered after %.0f ms, want about 300", ms);

    /* Trickling peer: the bytes it sends do not extend the deadline. */
    start = uv_hrtime();
    fd = client_connect(s->port);
    const char *partial = "GET /metrics HTTP/1.1\r\nHost: h\r\n";
    for (int i = 0; i < 8; i++) {
        send_all(fd, partial + i, 1);
        usleep(50 * 1000);
    }
    resp = read_to_close(fd, NULL);
    ms = ms_since(start);
    close(fd);
    assert_text(resp, error_response(408));
    free(resp);
    if (ms < 250 || ms > 3000)
        fail_msg("trickling peer answered after %.0f ms, want about 300", ms);
    assert_scrape(s->port, SCRAPE, 1);
}

static struct server limit_config = {.max_conns = 2};

/* A connection over the limit is closed at once without a byte. */
static void assert_refused(int port)
{
    int fd = client_connect(port);
    size_t len = 1;
    char *resp = read_to_close(fd, &len);
    close(fd);
    assert_int_equal(len, 0);
    free(resp);
}

/* Scrapes until one is served (a slot frees as soon as the server sees the end of a stream, a
 * moment after the peer closed); returns the response. */
static char *scrape_when_free(int port, int max_ms)
{
    uint64_t start = uv_hrtime();
    for (;;) {
        char *resp = exchange(port, SCRAPE, strlen(SCRAPE));
        if (resp[0] != '\0' || ms_since(start) > max_ms)
            return resp;
        free(resp);
        usleep(5 * 1000);
    }
}

static void test_connection_limit(void **state)
{
    struct server *s = *state;
    int a = client_connect(s->port);
    int b = client_connect(s->port);
    assert_refused(s->port);
    assert_refused(s->port);
    close(a);
    char want[1024];
    ok_response(want, sizeof want, 1);
    char *resp = scrape_when_free(s->port, 5000);
    assert_text(resp, want);
    free(resp);
    close(b);
    /* Both slots free again: one idle peer and one scrape fit. */
    ok_response(want, sizeof want, 2);
    resp = scrape_when_free(s->port, 5000);
    assert_text(resp, want);
    free(resp);
    int c = client_connect(s->port);
    assert_scrape(s->port, SCRAPE, 3);
    close(c);
}

static struct server linger_config = {.timeout_ms = 400, .max_conns = 1};

/* A peer that takes its response but never closes holds its slot until the server gives up on it
 * one timeout after sending its FIN; then the slot is free and the peer still had its answer. */
static void test_peer_never_closes(void **state)
{
    struct server *s = *state;
    int c = client_connect(s->port);
    uint64_t start = uv_hrtime();
    send_all(c, SCRAPE, strlen(SCRAPE));
    usleep(50 * 1000);
    assert_refused(s->port);
    char *resp = scrape_when_free(s->port, 5000);
    double ms = ms_since(start);
    char want[1024];
    ok_response(want, sizeof want, 2);
    assert_text(resp, want);
    free(resp);
    if (ms < 300 || ms > 3000)
        fail_msg("slot freed after %.0f ms, want about 400", ms);
    resp = read_to_close(c, NULL);
    ok_response(want, sizeof want, 1);
    assert_text(resp, want);
    free(resp);
    close(c);
}

static void test_many_scrapes(void **state)
{
    struct server *s = *state;
    enum { SCRAPES = 1000 };
    char want[1024];
    uint64_t start = uv_hrtime();
    for (unsigned i = 1; i <= SCRAPES; i++) {
        ok_response(want, sizeof want, i);
        char *resp = exchange(s->port, SCRAPE, strlen(SCRAPE));
        if (strcmp(resp, want) != 0)
            fail_msg("scrape %u:\n%s", i, resp);
        free(resp);
    }
    double ms = ms_since(start);
    printf("%d sequential scrapes in %.0f ms (%.0f per second)\n", SCRAPES, ms,
           SCRAPES / (ms / 1000));
}

/* The server closes with connections in every state: silent, half a request, and a request whose
 * response the peer does not read. The teardown checks uv_loop_close() == 0. */
static void test_close_with_open_connections(void **state)
{
    struct server *s = *state;
    int silent = client_connect(s->port);
    int half = client_connect(s->port);
    send_all(half, "GET /met", 8);
    int unread = client_connect(s->port);
    send_all(unread, SCRAPE, strlen(SCRAPE));
    usleep(100 * 1000);
    assert_scrape(s->port, SCRAPE, 2);
    server_stop(s);
    assert_true(s->done);
    assert_true(s->close_cb_ran);
    assert_int_equal(s->loop_close_rc, 0);
    /* Every peer sees the end of stream; the unread response was written in full before. */
    char *resp = read_to_close(silent, NULL);
    assert_text(resp, "");
    free(resp);
    resp = read_to_close(half, NULL);
    assert_text(resp, "");
    free(resp);
    resp = read_to_close(unread, NULL);
    char want[1024];
    ok_response(want, sizeof want, 1);
    assert_text(resp, want);
    free(resp);
    close(silent);
    close(half);
    close(unread);
}

static struct server failing_config = {.fail_render = true};

static void test_render_failure(void **state)
{
    struct server *s = *state;
    assert_exchange(s->port, SCRAPE, error_response(500));
    assert_exchange(s->port, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", error_response(404));
}

static struct server pages_config = {.pages = true};

/* A page response: its status line, the extra header lines, then HTTP_PAGE_HEADERS and the rest. */
static void page_response(char *out, size_t outlen, const char *status, const char *extra,
                          const char *type, const char *body)
{
    snprintf(out, outlen,
             "HTTP/1.1 %s\r\n%s" HTTP_PAGE_HEADERS "Content-Type: %s\r\n"
             "Content-Length: %zu\r\n"
             "Connection: close\r\n"
             "\r\n%s",
             status, extra, type, strlen(body), body);
}

/* Pages: a public one to anyone, private ones only with the token (401 first, then 405 for
 * another method), a failing one a 500, every page response with the page headers; the server's
 * own paths and the 404 of any other path are as before. */
static void test_pages(void **state)
{
    struct server *s = *state;
    char want[2048];
    page_response(want, sizeof want, "200 OK", "", "text/html; charset=utf-8", "<p>hi</p>");
    assert_exchange(s->port, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", want);
    assert_exchange(s->port, "GET /?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", want);
    page_response(want, sizeof want, "200 OK", "", "application/json", "{\"n\":1}");
    assert_exchange(s->port,
                    "GET /api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n", want);
    page_response(want, sizeof want, "401 Unauthorized",
                  "WWW-Authenticate: Bearer realm=\"sluice\"\r\n", "text/plain; charset=utf-8",
                  "401 Unauthorized\n");
    assert_exchange(s->port, "GET /api/doc HTTP/1.1\r\nHost: h\r\n\r\n", want);
    assert_exchange(s->port, "GET /api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer to\r\n\r\n",
                    want);
    assert_exchange(s->port, "POST /api/doc HTTP/1.1\r\nHost: h\r\n\r\n", want);
    page_response(want, sizeof want, "405 Method Not Allowed", "Allow: GET\r\n",
                  "text/plain; charset=utf-8", "405 Method Not Allowed\n");
    assert_exchange(s->port, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", want);
    assert_exchange(s->port, "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", want);
    assert_exchange(
        s->port, "DELETE /api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n", want);
    page_response(want, sizeof want, "500 Internal Server Error", "", "text/plain; charset=utf-8",
                  "500 Internal Server Error\n");
    assert_exchange(s->port,
                    "GET /api/fail HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n", want);
    /* Not pages: exact paths only, no decoding, no traversal. */
    static const char *const not_found[] = {
        "GET /index.html HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /api/doc/ HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n",
        "GET /api/../api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n",
        "GET /%61pi/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n",
        "GET //api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n",
        "GET /../etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof not_found / sizeof not_found[0]; i++)
        assert_exchange(s->port, not_found[i], error_response(404));
    /* /metrics keeps its token, the probes need none. */
    assert_exchange(s->port, SCRAPE,
                    "HTTP/1.1 401 Unauthorized\r\n"
                    "WWW-Authenticate: Bearer realm=\"sluice\"\r\n"
                    "Content-Type: text/plain; charset=utf-8\r\n"
                    "Content-Length: 17\r\n"
                    "Connection: close\r\n"
                    "\r\n"
                    "401 Unauthorized\n");
    static const char healthz[] = "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n";
    char *resp = exchange(s->port, healthz, strlen(healthz));
    assert_non_null(strstr(resp, "\r\n\r\nok\n"));
    free(resp);
}

static struct server deferred_config = {.timeout_ms = 2000, .defer_ms = 100, .pages = true};

/* Answers given later, from another thread: the same bytes as at once (the registry as it was
 * at the request), many at once, a page; a peer gone before the answer, and one that stopped
 * sending, change nothing for the others. */
static void test_deferred(void **state)
{
    struct server *s = *state;
    static const char scrape[] =
        "GET /metrics HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n";
    assert_scrape(s->port, scrape, 1);
    /* Eight at once: each its own count (the registry frozen when its request came). */
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = client_connect(s->port);
        send_all(fds[i], scrape, strlen(scrape));
        usleep(20 * 1000); /* in order */
    }
    for (int i = 0; i < 8; i++) {
        char *resp = read_to_close(fds[i], NULL);
        close(fds[i]);
        char want[1024];
        ok_response(want, sizeof want, 2 + (unsigned)i);
        assert_text(resp, want);
        free(resp);
    }
    char want[2048];
    page_response(want, sizeof want, "200 OK", "", "application/json", "{\"n\":2}");
    assert_exchange(s->port,
                    "GET /api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n", want);
    /* Stopped sending: still answered. */
    int fd = client_connect(s->port);
    send_all(fd, scrape, strlen(scrape));
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    char *resp = read_to_close(fd, NULL);
    close(fd);
    ok_response(want, sizeof want, 10);
    assert_text(resp, want);
    free(resp);
    /* Gone before the answer: a close, and a reset (whether the server read the request first
     * or not; so the scrape count is not checked after these). */
    fd = client_connect(s->port);
    send_all(fd, scrape, strlen(scrape));
    close(fd);
    fd = client_connect(s->port);
    send_all(fd, scrape, strlen(scrape));
    struct linger lg = {1, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(fd);
    usleep(300 * 1000); /* the dropped answers came and went */
    page_response(want, sizeof want, "200 OK", "", "application/json", "{\"n\":2}");
    assert_exchange(s->port,
                    "GET /api/doc HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\n\r\n", want);
}

static struct server deferred_late_config = {.timeout_ms = 200, .defer_ms = 600};

/* An answer later than the connection's timeout: 503 at the timeout, the answer dropped when it
 * comes; the server closes with answers still to come. */
static void test_deferred_timeout(void **state)
{
    struct server *s = *state;
    uint64_t start = uv_hrtime();
    char *resp = exchange(s->port, SCRAPE, strlen(SCRAPE));
    double ms = ms_since(start);
    assert_text(resp, "HTTP/1.1 503 Service Unavailable\r\n"
                      "Content-Type: text/plain; charset=utf-8\r\n"
                      "Content-Length: 24\r\n"
                      "Connection: close\r\n"
                      "\r\n"
                      "503 Service Unavailable\n");
    free(resp);
    if (ms < 150 || ms > 3000)
        fail_msg("answered after %.0f ms, want about 200", ms);
    usleep(600 * 1000);
    /* A request still waiting when the server stops (the teardown stops it now). */
    int fd = client_connect(s->port);
    send_all(fd, SCRAPE, strlen(SCRAPE));
    usleep(50 * 1000);
    server_stop(s);
    close(fd);
}

static void test_start_errors(void **state)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct http_server *srv = NULL;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(
        http_server_start(&loop, "127.0.0.1", 70000, render, NULL, &srv, err, sizeof err),
        SLUICE_ERR_INVALID);
    assert_string_equal(err, "listen on 127.0.0.1:70000: port out of range");
    assert_int_equal(http_server_start(&loop, "127.0.0.1", -1, render, NULL, &srv, err, sizeof err),
                     SLUICE_ERR_INVALID);
    assert_string_equal(err, "listen on 127.0.0.1:-1: port out of range");
    assert_int_equal(
        http_server_start(&loop, "no-such-host.invalid", 0, render, NULL, &srv, err, sizeof err),
        SLUICE_ERR_NOT_FOUND);
    assert_true(strncmp(err, "listen on no-such-host.invalid:0: ", 34) == 0);

    /* A port in use. */
    assert_int_equal(http_server_start(&loop, "127.0.0.1", 0, render, NULL, &srv, err, sizeof err),
                     0);
    int port = http_server_port(srv);
    assert_true(port > 0);
    struct http_server *second = NULL;
    assert_int_equal(
        http_server_start(&loop, "127.0.0.1", port, render, NULL, &second, err, sizeof err),
        UV_EADDRINUSE);
    char want[128];
    snprintf(want, sizeof want, "listen on 127.0.0.1:%d: Address already in use", port);
    assert_string_equal(err, want);
    assert_null(second);
    /* Closing right after starting, before the loop ever ran. */
    bool closed = false;
    http_server_close(srv, set_flag, &closed);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_true(closed);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- the pure parser ------------------------------------------------------------------------- */

struct parse_case {
    const char *text;
    int want;
    const char *method;
    const char *path;
    int minor;
};

static void test_parser_table(void **state)
{
    static const struct parse_case cases[] = {
        {"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/metrics", 1},
        {"GET /metrics?a=b&c HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/metrics", 1},
        {"GET /? HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/", 1},
        {"POST /a/b HTTP/1.0\r\n\r\n", 0, "POST", "/a/b", 0},
        {"GET HTTP://H:1/x?y HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/x", 1},
        {"GET https://h HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/", 1},
        {"GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/", 1},
        {"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", 0, "OPTIONS", "*", 1},
        {"M-._~!#$%&'*+^`| / HTTP/1.9\r\nhOsT:\r\n\r\n", 0, "M-._~!#$%&'*+^`|", "/", 9},
        {"", SLUICE_ERR_TRUNCATED},
        {"GET /metrics HTTP/1.1", SLUICE_ERR_TRUNCATED},
        {"GET /metrics HTTP/1.1\r\n", SLUICE_ERR_TRUNCATED},
        {"GET /metrics HTTP/1.1\r\nHost: h\r\n\r", SLUICE_ERR_TRUNCATED},
        {"garbage without end", SLUICE_ERR_TRUNCATED},
        {"\n", SLUICE_ERR_INVALID},
        {"\r\n\r\n", SLUICE_ERR_INVALID},
        {"GET /metrics HTTP/1.1\r\nHost: h\n", SLUICE_ERR_INVALID},
        {"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "/metrics", 1},
        {"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 0, "GET", "*", 1},
        {"GET ** HTTP/1.1\r\nHost: h\r\n\r\n", SLUICE_ERR_INVALID},
        {"GET /metrics HTTP/3.1\r\nHost: h\r\n\r\n", SLUICE_ERR_UNSUPPORTED},
        {"GET /metrics HTTP/3.1\r\nHost h\r\n\r\n", SLUICE_ERR_INVALID},
        {"GET /metrics HTTP/1.1\r\nA: \xff\xfe\r\nHost: h\r\n\r\n", 0, "GET", "/metrics", 1},
        {"GET /metrics HTTP/1.1\r\nA: b\tc\r\nHost: h\r\n\r\n", 0, "GET", "/metrics", 1},
        {"GET /metrics HTTP/1.1\r\nA:\x1b\r\nHost: h\r\n\r\n", SLUICE_ERR_INVALID},
        {"GET /metrics HTTP/1.1\r\n\tHost: h\r\n\r\n", SLUICE_ERR_INVALID},
        {"GET\t/metrics HTTP/1.1\r\nHost: h\r\n\r\n", SLUICE_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct parse_case *c = &cases[i];
        struct http_request req;
        memset(&req, 0, sizeof req);
        int rc = http_parse_request(c->text, strlen(c->text), &req);
        if (rc != c->want)
            fail_msg("case %zu: %d, want %d", i, rc, c->want);
        if (rc != 0)
            continue;
        if (req.method_len != strlen(c->method) ||
            memcmp(req.method, c->method, req.method_len) != 0)
            fail_msg("case %zu: method %.*s", i, (int)req.method_len, req.method);
        if (req.path_len != strlen(c->path) || memcmp(req.path, c->path, req.path_len) != 0)
            fail_msg("case %zu: path %.*s", i, (int)req.path_len, req.path);
        assert_int_equal(req.minor, c->minor);
        assert_int_equal(req.head_len, strlen(c->text));
    }
    /* Bytes after the head are left alone, and a head is found at any length of input. */
    const char *two = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
    struct http_request req;
    assert_int_equal(http_parse_request(two, strlen(two), &req), 0);
    assert_int_equal(req.head_len, 28);
    for (size_t n = 0; n < 28; n++)
        assert_int_equal(http_parse_request(two, n, &req), SLUICE_ERR_TRUNCATED);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parser_table),
        cmocka_unit_test(test_start_errors),
        cmocka_unit_test_setup_teardown(test_scrape, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_not_found_and_method, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_probes, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_request_size, server_setup, server_teardown),
        cmocka_unit_test_prestate_setup_teardown(test_timeouts, server_setup, server_teardown,
                                                 &timeout_config),
        cmocka_unit_test_prestate_setup_teardown(test_connection_limit, server_setup,
                                                 server_teardown, &limit_config),
        cmocka_unit_test_prestate_setup_teardown(test_peer_never_closes, server_setup,
                                                 server_teardown, &linger_config),
        cmocka_unit_test_setup_teardown(test_many_scrapes, server_setup, server_teardown),
        cmocka_unit_test_setup_teardown(test_close_with_open_connections, server_setup,
                                        server_teardown),
        cmocka_unit_test_prestate_setup_teardown(test_deferred, server_setup, server_teardown,
                                                 &deferred_config),
        cmocka_unit_test_prestate_setup_teardown(test_deferred_timeout, server_setup,
                                                 server_teardown, &deferred_late_config),
        cmocka_unit_test_prestate_setup_teardown(test_render_failure, server_setup, server_teardown,
                                                 &failing_config),
        cmocka_unit_test_prestate_setup_teardown(test_pages, server_setup, server_teardown,
                                                 &pages_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
