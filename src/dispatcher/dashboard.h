/* The dispatcher's web dashboard, served by its metrics HTTP server (common/http.h) at /: a page
 * of the cluster (workers, jobs, a worker's tasks, charts of the last 15 minutes) that fetches its
 * data from GET /api/status (the status document of status.h, the same as `sluice status
 * --json`) and GET /api/history (history.h) every 2 seconds.
 *
 * The page's files (src/dispatcher/dashboard/) are embedded in the binary at build time
 * (cmake/embed_assets.cmake): nothing is loaded from elsewhere, and a URL is looked up in that
 * fixed table, never mapped onto the file system. They hold no data, so anyone may load them; the
 * two JSON endpoints need the cluster's token when it has one, as /metrics does. The page asks
 * for the token once, keeps it in the tab's session storage and sends it as "Authorization:
 * Bearer"; it builds every element with textContent, so names from users stay text.
 *
 * /api/status is rendered at the moment of the request, like /metrics, while the status RPC first
 * waits for the journal's pending commits: the dashboard may show a change a moment before it is
 * durable (a fault-tolerant dispatcher that crashed then would not have it after its restart).
 *
 * Threading: the loop thread of the dispatcher, like the HTTP server. */
#ifndef SLUICE_DISPATCHER_DASHBOARD_H
#define SLUICE_DISPATCHER_DASHBOARD_H

#include "common/http.h"

#include <stddef.h>

struct dispatcher; /* server.h */

/* One embedded file. */
struct dashboard_asset {
    const char *path;         /* the URL path, "/" for the page */
    const char *content_type; /* from the file's extension */
    const unsigned char *data;
    size_t len;
};

/* The generated table (dashboard_assets.c in the build tree). */
extern const struct dashboard_asset dashboard_assets[];
extern const size_t dashboard_nassets;

enum dashboard_kind {
    DASHBOARD_NONE = 0, /* not the dashboard's */
    DASHBOARD_ASSET,    /* one of dashboard_assets */
    DASHBOARD_STATUS,   /* /api/status */
    DASHBOARD_HISTORY   /* /api/history */
};

/* What path (len bytes, not NUL-terminated; exact match, no decoding) names; for an asset,
 * *asset is set. Pure. */
enum dashboard_kind dashboard_route(const char *path, size_t len,
                                    const struct dashboard_asset **asset);

/* Who may read path: HTTP_PAGE_PUBLIC for the assets, HTTP_PAGE_PRIVATE for the JSON endpoints,
 * HTTP_PAGE_NONE for any other path. Pure. */
enum http_access dashboard_access(const char *path, size_t len);

/* Answers path (one dashboard_access accepted) for dispatcher d: an asset's bytes (static), or
 * the JSON document (malloc'd, owned by *res). Returns 0, SLUICE_ERR_NOT_FOUND for a path that is
 * not the dashboard's, or SLUICE_ERR_NOMEM. With srv (the server whose page callback this is),
 * the status document is written out off the loop and answered later: HTTP_DEFERRED. */
int dashboard_serve(struct dispatcher *d, struct http_server *srv, const char *path, size_t len,
                    struct http_response *res);

#endif
