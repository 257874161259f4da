/* A minimal, strict HTTP/1.1 server on a libuv loop that serves GET /metrics, the probes
 * GET /healthz and GET /readyz, and the pages its owner adds (http_server_set_pages: the
 * dispatcher's dashboard at /, its assets and its JSON endpoints /api/status and /api/history).
 *
 * Happy path: http_server_start() binds and listens; each accepted connection reads one request
 * head (request line and header fields up to the empty line) into a fixed buffer, answers it
 * with exactly one response carrying "Connection: close", half-closes its side, and closes once
 * the peer has closed too. For GET /metrics the render callback builds the body on the loop
 * thread, at the moment of the request, or has it built elsewhere and answers later
 * (http_defer).
 *
 * Responses (the body of every error response is its status line text and a newline):
 *   200  GET /metrics (a query string is ignored); Content-Type: text/plain; version=0.0.4;
 *        charset=utf-8; the body is what render produced
 *   200  GET /healthz: "ok\n" (the process and its loop run); GET /readyz when the ready
 *        callback says so (or there is none): "ready\n". Neither needs the token.
 *   503  GET /readyz when the ready callback says not: "not ready: WHY\n"
 *   400  a malformed request line or header section (bare LF, control characters, a space
 *        before a colon, folded lines, an HTTP/1.1 request without exactly one Host field,
 *        more than one Authorization field)
 *   401  /metrics on a server with a token (http_server_set_token) without the field
 *        "Authorization: Bearer TOKEN" carrying it; with "WWW-Authenticate: Bearer
 *        realm="sluice""
 *   200  a page (http_server_set_pages): its content type and body; every page response,
 *        errors included, carries HTTP_PAGE_HEADERS (a strict Content-Security-Policy, nosniff,
 *        no framing, no referrer, no caching)
 *   401  a private page without the token, as /metrics
 *   404  any path other than /metrics, /healthz, /readyz and the pages, whatever the method
 *   405  those paths with a method other than GET, with "Allow: GET"
 *   408  no complete request head within the timeout after the connection was accepted
 *   431  a request head longer than HTTP_MAX_REQUEST bytes
 *   500  render failed
 *   505  an HTTP major version other than 1
 * Request bodies are never read (GET has none, and the connection closes after one response).
 *
 * Failure modes: each phase of a connection gets one timeout: delivering its request head
 * (counted from the accept however the bytes trickle in; 408 when it runs out), taking the
 * response, and closing after the server's FIN; a peer that overruns the second or third is cut
 * off. A peer that goes away is closed without a log line. Beyond the connection limit, a new
 * connection is accepted and closed at once without a response, so memory stays bounded
 * whatever peers do. Nothing a peer does can block the loop.
 *
 * Threading: every function runs on the loop's thread; callbacks run there too.
 *
 * Signals: libuv writes with plain write(2), so SIGPIPE must not reach its default action: the
 * servers' loop threads block it (loop_thread_spawn), and the binaries also ignore it. */
#ifndef SLUICE_COMMON_HTTP_H
#define SLUICE_COMMON_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Longest request head accepted, request line and header fields with their CRLFs included. */
#define HTTP_MAX_REQUEST 8192
/* Defaults of the settings below. */
#define HTTP_DEFAULT_TIMEOUT_MS 5000
#define HTTP_DEFAULT_MAX_CONNECTIONS 64

struct http_server;

/* Builds the body for GET /metrics. On success returns 0 and sets *body to a malloc'ed buffer of
 * *len bytes (NULL with 0 is an empty body), which the server then owns and frees. Any negative
 * code makes the response a 500, and *body must then be left unset; HTTP_DEFERRED after
 * http_defer answers later (below). Runs on the loop thread. */
typedef int (*http_render_cb)(void *user, char **body, size_t *len);

/* Binds host:port (port 0 picks a free port; host is numeric or resolved, which may block) and
 * starts serving on loop. Returns 0 and sets *out, or a negative code with one line in err
 * ("listen on 127.0.0.1:80: Permission denied"); after a failure nothing is left to close,
 * unless the loop still has to run once to release a handle (the caller's next run of the loop,
 * or its shutdown, does that). render must not be NULL. */
int http_server_start(uv_loop_t *loop, const char *host, int port, http_render_cb render,
                      void *user, struct http_server **out, char *err, size_t errlen);

/* The port the server is bound to (useful after binding port 0). */
int http_server_port(const struct http_server *srv);

/* The timeout of each phase of a connection (see above); 0 restores HTTP_DEFAULT_TIMEOUT_MS.
 * Applies to connections accepted afterwards. */
void http_server_set_timeout(struct http_server *srv, uint64_t timeout_ms);

/* Requires "Authorization: Bearer TOKEN" on GET /metrics and the private pages, TOKEN being the len
 * bytes at token (compared in constant time); NULL or 0 requires nothing. token is borrowed: it
 * must outlive srv. */
void http_server_set_token(struct http_server *srv, const uint8_t *token, size_t len);

/* Whether the server is ready for GET /readyz; when not, a reason (one line) goes into why.
 * Runs on the loop thread. */
typedef bool (*http_ready_cb)(void *user, char *why, size_t whylen);

/* Sets the ready callback of GET /readyz (NULL: always ready). */
void http_server_set_ready(struct http_server *srv, http_ready_cb ready, void *user);

/* Requests answered 401 since start. */
uint64_t http_server_unauthorized(const struct http_server *srv);

/* How many connections may be open at once; 0 restores HTTP_DEFAULT_MAX_CONNECTIONS. */
void http_server_set_max_connections(struct http_server *srv, unsigned max);

/* Stops listening and closes every connection (responses not yet written are dropped), then
 * calls cb (may be NULL) from the last close callback and frees srv. Call it once, and do not
 * use srv afterwards; the loop must run for the closing to finish. */
void http_server_close(struct http_server *srv, void (*cb)(void *user), void *user);

/* ---- pages beyond /metrics and the probes --------------------------------------------------- */

/* The headers of every page response. The policy allows scripts, styles, images and fetches from
 * the server itself only: no inline script or style, no eval, no plugin, no framing. */
#define HTTP_PAGE_CSP                                                                              \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
#define HTTP_PAGE_HEADERS                                                                          \
    "Content-Security-Policy: " HTTP_PAGE_CSP "\r\n"                                               \
    "X-Content-Type-Options: nosniff\r\n"                                                          \
    "X-Frame-Options: DENY\r\n"                                                                    \
    "Referrer-Policy: no-referrer\r\n"                                                             \
    "Cache-Control: no-store\r\n"

enum http_access {
    HTTP_PAGE_NONE = 0, /* no such page: 404 */
    HTTP_PAGE_PUBLIC,   /* served to anyone (the page's code and styles, which hold no data) */
    HTTP_PAGE_PRIVATE   /* needs the token, as /metrics does */
};

/* What a page answers. */
struct http_response {
    const char *content_type; /* static, e.g. "text/html; charset=utf-8" */
    const char *body;         /* len bytes */
    size_t len;
    bool owned; /* body is malloc'd: the server frees it once written; else it must live on */
};

/* The pages of a server. find says whether path (path_len bytes, not NUL-terminated, without
 * the query) is a page and who may read it; it must not fail. serve, called only for a path that
 * find accepted, with the token checked and the method GET, fills in *res and returns 0, or
 * returns a negative code for a 500 (leaving nothing owned in *res), or HTTP_DEFERRED after
 * http_defer (below). Both run on the loop thread. */
struct http_pages {
    enum http_access (*find)(void *user, const char *path, size_t path_len);
    int (*serve)(void *user, const char *path, size_t path_len, struct http_response *res);
    void *user;
};

/* ---- answering later ------------------------------------------------------------------------ */

/* A render or serve callback that builds its answer elsewhere (on another thread, say) calls
 * http_defer(srv) during the callback and returns HTTP_DEFERRED; the server waits for the answer
 * (discarding input, within the connection's timeout: a 503 when it runs out), which the owner
 * gives exactly once with http_reply_send(r, rc, res) on the loop thread: rc 0 with res (as serve
 * fills it; for GET /metrics the content type is the server's own), or a negative code for a 500.
 * A reply outlives its connection and the server: when the peer went away, the timeout answered
 * or the server closed, http_reply_send only frees r (and res's body when owned). http_defer
 * returns NULL when out of memory (then answer at once). */
#define HTTP_DEFERRED 1
struct http_reply;
struct http_reply *http_defer(struct http_server *srv);
void http_reply_send(struct http_reply *r, int rc, const struct http_response *res);

/* Answers the request being served (from its render or serve callback, which then returns what
 * this returns) with what produce(arg, res) makes on libuv's thread pool, off the loop thread:
 * produce fills in *res and returns 0 (the body owned, or static), or returns a negative code
 * for a 500; release(arg) (may be NULL) then runs on the loop thread, whatever happened to the
 * connection meanwhile. arg must hold everything produce reads: nothing the loop thread changes.
 * At most HTTP_POOL_ANSWERS are produced on the pool at once; beyond that produce runs on the
 * loop thread at once (bounded memory and pool threads however many requests come). The server
 * is freed only after the last answer (its close callback waits for them). Returns
 * HTTP_DEFERRED, or SLUICE_ERR_NOMEM after calling release (answer 500). */
#define HTTP_POOL_ANSWERS 2
int http_answer_from_pool(struct http_server *srv,
                          int (*produce)(void *arg, struct http_response *res),
                          void (*release)(void *arg), void *arg);

/* Sets the server's pages (copied; NULL: none). Paths /metrics, /healthz and /readyz stay the
 * server's own. */
void http_server_set_pages(struct http_server *srv, const struct http_pages *pages);

/* ---- the metrics server of an embedded dispatcher or worker -------------------------------- */

struct security_ctx; /* security.h */

/* Copies host (NULL: "127.0.0.1") into *out (free it), where the metrics server will listen,
 * and applies sec's protected-by-default rule to it (security_check_listen). Returns 0; or
 * SLUICE_ERR_NOMEM with "start: why", or SLUICE_ERR_DENIED with "metrics: why", in err. After a
 * denial *out is set all the same. Runs on any thread. */
int http_metrics_host(const struct security_ctx *sec, const char *host, char **out, char *err,
                      size_t errlen);

/* http_server_start, then, when sec (NULL allowed) has a token, http_server_set_token with it
 * (sec must outlive the server). A failure reads "metrics: why" in err. */
int http_metrics_start(uv_loop_t *loop, const char *host, int port, http_render_cb render,
                       void *user, const struct security_ctx *sec, struct http_server **out,
                       char *err, size_t errlen);

/* ---- the request parser, pure and exposed for tests and fuzzing ---------------------------- */

struct http_request {
    const char *method; /* pointers into the parsed buffer; not NUL-terminated */
    size_t method_len;
    const char *path; /* the path of the target, without scheme, authority or query */
    size_t path_len;
    int minor;       /* the x in HTTP/1.x */
    size_t head_len; /* bytes up to and including the empty line */
    /* The value of the Authorization field without the white space around it, or NULL. */
    const char *authorization;
    size_t authorization_len;
};

/* Parses the request head at the start of buf[0..len). Returns
 *   0                      a complete, well-formed head; *req is filled in
 *   SLUICE_ERR_TRUNCATED   no empty line yet and nothing wrong so far: read more
 *   SLUICE_ERR_INVALID     malformed (answer 400); also as soon as a bare LF appears
 *   SLUICE_ERR_UNSUPPORTED a well-formed request line of an HTTP major version other than 1
 * Bytes after the head are not looked at. The length limit is the caller's business. */
int http_parse_request(const char *buf, size_t len, struct http_request *req);

#endif
