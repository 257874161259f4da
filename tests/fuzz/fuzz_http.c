/* Feeds arbitrary bytes to the HTTP request parser. A complete head must lie inside the input,
 * its method, path and Authorization value must point into it, and parsing any prefix of the input
 * must never report a complete head ending after that prefix. */
#include "fuzz.h"

#include "common/error.h"
#include "common/http.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *buf = (const char *)data;
    struct http_request req;
    int rc = http_parse_request(buf, len, &req);
    assert(rc == 0 || rc == SLUICE_ERR_TRUNCATED || rc == SLUICE_ERR_INVALID ||
           rc == SLUICE_ERR_UNSUPPORTED);
    if (rc == 0) {
        assert(req.head_len <= len);
        assert(req.method >= buf && req.method + req.method_len <= buf + req.head_len);
        /* The path points into the head, except the "/" of an absolute target with an empty
         * path, which the parser supplies itself. */
        assert((req.path >= buf && req.path + req.path_len <= buf + req.head_len) ||
               (req.path_len == 1 && req.path[0] == '/'));
        /* An Authorization value lies inside the head, without white space at either end. */
        if (req.authorization) {
            assert(req.authorization >= buf &&
                   req.authorization + req.authorization_len <= buf + req.head_len);
            if (req.authorization_len > 0) {
                char first = req.authorization[0];
                char last = req.authorization[req.authorization_len - 1];
                assert(first != ' ' && first != '\t' && last != ' ' && last != '\t');
            }
        }
        /* The same head alone parses to the same request. */
        struct http_request again;
        assert(http_parse_request(buf, req.head_len, &again) == 0);
        assert(again.head_len == req.head_len && again.path_len == req.path_len);
        /* Any shorter prefix is incomplete (or already known to be malformed). */
        if (req.head_len > 0) {
            int r2 = http_parse_request(buf, req.head_len - 1, &again);
            assert(r2 != 0);
        }
    }
    return 0;
}
