#include "dashboard.h"

#include "server.h"

#include "status.h"

#include "common/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static bool path_is(const char *path, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(path, want, len) == 0;
}

enum dashboard_kind dashboard_route(const char *path, size_t len,
                                    const struct dashboard_asset **asset)
{
    if (path_is(path, len, "/api/status"))
        return DASHBOARD_STATUS;
    if (path_is(path, len, "/api/history"))
        return DASHBOARD_HISTORY;
    for (size_t i = 0; i < dashboard_nassets; i++) {
        if (path_is(path, len, dashboard_assets[i].path)) {
            if (asset)
                *asset = &dashboard_assets[i];
            return DASHBOARD_ASSET;
        }
    }
    return DASHBOARD_NONE;
}

enum http_access dashboard_access(const char *path, size_t len)
{
    switch (dashboard_route(path, len, NULL)) {
    case DASHBOARD_ASSET:
        return HTTP_PAGE_PUBLIC;
    case DASHBOARD_STATUS:
    case DASHBOARD_HISTORY:
        return HTTP_PAGE_PRIVATE;
    case DASHBOARD_NONE:
        break;
    }
    return HTTP_PAGE_NONE;
}

/* The status tree, written out (and freed) on libuv's pool (http_answer_from_pool); release
 * frees it when the work never ran. */
struct status_later {
    json_t *tree;
};

static int status_produce(void *arg, struct http_response *res)
{
    struct status_later *l = arg;
    char *json = NULL;
    int rc = status_json_dump(l->tree, &json); /* frees the tree */
    l->tree = NULL;
    if (rc < 0)
        return rc;
    *res = (struct http_response){"application/json", json, strlen(json), true};
    return 0;
}

static void status_release(void *arg)
{
    struct status_later *l = arg;
    json_decref(l->tree);
    free(l);
}

int dashboard_serve(struct dispatcher *d, struct http_server *srv, const char *path, size_t len,
                    struct http_response *res)
{
    const struct dashboard_asset *asset = NULL;
    char *json = NULL;
    int rc;
    switch (dashboard_route(path, len, &asset)) {
    case DASHBOARD_ASSET:
        *res = (struct http_response){asset->content_type, (const char *)asset->data, asset->len,
                                      false};
        return 0;
    case DASHBOARD_STATUS:
        if (srv) {
            /* The tree is built here, where the state is; writing out its megabytes (half the
             * work at thousands of workers) happens off the loop. */
            struct status_later *l = calloc(1, sizeof *l);
            if (!l)
                return SLUICE_ERR_NOMEM;
            if ((rc = dispatcher_status_tree(d, &l->tree)) < 0) {
                free(l);
                return rc;
            }
            return http_answer_from_pool(srv, status_produce, status_release, l);
        }
        rc = dispatcher_status_render(d, &json);
        break;
    case DASHBOARD_HISTORY:
        rc = dispatcher_history_render(d, &json);
        break;
    default:
        return SLUICE_ERR_NOT_FOUND;
    }
    if (rc < 0)
        return rc;
    *res = (struct http_response){"application/json", json, strlen(json), true};
    return 0;
}
