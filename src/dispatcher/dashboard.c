#include "dashboard.h"

#include "server.h"

#include "common/error.h"

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

int dashboard_serve(struct dispatcher *d, const char *path, size_t len, struct http_response *res)
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
