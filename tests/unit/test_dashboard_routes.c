/* The dashboard's routes (dispatcher/dashboard.h): the table of embedded files, exact paths only
 * (no decoding, no traversal, no directory), who may read what, and what the files themselves
 * promise: the page loads nothing but files of the table, runs no inline script, and no script
 * parses data as HTML or code (innerHTML, outerHTML, insertAdjacentHTML, document.write, eval,
 * new Function). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher/dashboard.h"

static enum dashboard_kind route(const char *path, const struct dashboard_asset **asset)
{
    return dashboard_route(path, strlen(path), asset);
}

static void test_routes(void **state)
{
    (void)state;
    const struct {
        const char *path;
        enum dashboard_kind kind;
        enum http_access access;
        const char *type; /* of an asset */
    } cases[] = {
        {"/", DASHBOARD_ASSET, HTTP_PAGE_PUBLIC, "text/html; charset=utf-8"},
        {"/app.js", DASHBOARD_ASSET, HTTP_PAGE_PUBLIC, "text/javascript; charset=utf-8"},
        {"/chart.js", DASHBOARD_ASSET, HTTP_PAGE_PUBLIC, "text/javascript; charset=utf-8"},
        {"/style.css", DASHBOARD_ASSET, HTTP_PAGE_PUBLIC, "text/css; charset=utf-8"},
        {"/favicon.svg", DASHBOARD_ASSET, HTTP_PAGE_PUBLIC, "image/svg+xml"},
        {"/api/status", DASHBOARD_STATUS, HTTP_PAGE_PRIVATE, NULL},
        {"/api/history", DASHBOARD_HISTORY, HTTP_PAGE_PRIVATE, NULL},
        {"/index.html", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/api", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/api/", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/api/status/", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/api/statusx", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/API/status", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"//app.js", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/./app.js", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/../app.js", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/%61pp.js", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/app.js/", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/dashboard/app.js", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/../../etc/passwd", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"/metrics", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
        {"*", DASHBOARD_NONE, HTTP_PAGE_NONE, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct dashboard_asset *a = NULL;
        enum dashboard_kind k = route(cases[i].path, &a);
        if (k != cases[i].kind)
            fail_msg("%s: kind %d, expected %d", cases[i].path, k, cases[i].kind);
        assert_int_equal(dashboard_access(cases[i].path, strlen(cases[i].path)), cases[i].access);
        if (cases[i].type) {
            assert_non_null(a);
            assert_string_equal(a->path, cases[i].path);
            assert_string_equal(a->content_type, cases[i].type);
            assert_true(a->len > 0);
        }
    }
    /* A path is compared over its length: a prefix of a known path is not it. */
    assert_int_equal(dashboard_route("/app.jsX", 7, NULL), DASHBOARD_ASSET);
    assert_int_equal(dashboard_route("/app.js", 6, NULL), DASHBOARD_NONE);
    assert_int_equal(dashboard_nassets, 5);
}

/* An asset's text, NUL-terminated (the table's arrays carry a NUL after their bytes). */
static const char *text_of(const char *path)
{
    const struct dashboard_asset *a = NULL;
    assert_int_equal(route(path, &a), DASHBOARD_ASSET);
    assert_int_equal(a->data[a->len], 0);
    assert_int_equal(strlen((const char *)a->data), a->len);
    return (const char *)a->data;
}

/* Every src= and href= of the page names an asset of the table or a fragment ("#/"). */
static void test_page_loads_only_assets(void **state)
{
    (void)state;
    const char *html = text_of("/");
    size_t refs = 0;
    for (const char *attr = "src=\""; attr; attr = strcmp(attr, "src=\"") == 0 ? "href=\"" : NULL) {
        for (const char *p = strstr(html, attr); p; p = strstr(p + 1, attr)) {
            const char *v = p + strlen(attr);
            const char *end = strchr(v, '"');
            assert_non_null(end);
            size_t n = (size_t)(end - v);
            if (n > 0 && v[0] == '#')
                continue;
            if (dashboard_route(v, n, NULL) != DASHBOARD_ASSET)
                fail_msg("the page refers to %.*s, not an embedded file", (int)n, v);
            refs++;
        }
    }
    assert_int_equal(refs, 4); /* the icon, the style sheet, two scripts */
    /* No inline script: every script element has a src. */
    for (const char *p = strstr(html, "<script"); p; p = strstr(p + 1, "<script")) {
        const char *close = strchr(p, '>');
        assert_non_null(close);
        assert_non_null(memmem(p, (size_t)(close - p), " src=\"/", 7));
        assert_true(strncmp(close + 1, "</script>", 9) == 0);
    }
    /* No inline handler or style attribute either (the policy would refuse them). */
    assert_null(strstr(html, " onclick"));
    assert_null(strstr(html, " onload"));
    assert_null(strstr(html, " style=\""));
    assert_null(strstr(html, "<style"));
}

static void test_scripts_never_parse_data(void **state)
{
    (void)state;
    static const char *const scripts[] = {"/app.js", "/chart.js"};
    static const char *const banned[] = {"innerHTML",      "outerHTML",   "insertAdjacentHTML",
                                         "document.write", "eval(",       "new Function",
                                         "setTimeout('",   "localStorage"};
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
        const char *js = text_of(scripts[i]);
        for (size_t k = 0; k < sizeof banned / sizeof banned[0]; k++)
            if (strstr(js, banned[k]))
                fail_msg("%s uses %s", scripts[i], banned[k]);
    }
    /* The token is kept in session storage and sent only in the Authorization header. */
    const char *app = text_of("/app.js");
    assert_non_null(strstr(app, "sessionStorage"));
    assert_non_null(strstr(app, "'Bearer ' + token"));
    assert_null(strstr(app, "?token"));
    assert_null(strstr(app, "&token"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_page_loads_only_assets),
        cmocka_unit_test(test_scripts_never_parse_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
