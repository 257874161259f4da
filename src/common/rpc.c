/* The parts of rpc.h that are not the server or the client: addresses and incarnations. The
 * server lives in rpc_server.c, the client in rpc_client.c, the connection they share in
 * conn.c. */
#include "rpc.h"

#include "error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SCHEME "sluice://"

int rpc_parse_address(const char *text, char *host, size_t hostlen, int *port, char *err,
                      size_t errlen)
{
    const char *p = text;
    if (strncmp(p, SCHEME, strlen(SCHEME)) == 0)
        p += strlen(SCHEME);

    const char *h, *colon;
    size_t hlen;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (close == NULL)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address '%s': missing ']'", text);
        h = p + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
        if (*colon != ':')
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "bad address '%s': expected ':PORT' after ']'", text);
    } else {
        colon = strrchr(p, ':');
        if (colon == NULL)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address '%s': expected HOST:PORT",
                           text);
        h = p;
        hlen = (size_t)(colon - h);
        if (memchr(h, ':', hlen))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "bad address '%s': an IPv6 host must be in brackets", text);
    }
    if (hlen == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address '%s': empty host", text);
    if (hlen >= hostlen)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address '%s': host too long", text);

    const char *digits = colon + 1;
    long value = 0;
    size_t ndigits = strspn(digits, "0123456789");
    if (ndigits == 0 || ndigits > 5 || digits[ndigits] != '\0' ||
        (value = strtol(digits, NULL, 10)) < 1 || value > 65535)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "bad address '%s': port must be a number from 1 to 65535", text);

    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)value;
    return 0;
}

void rpc_format_address(char *out, size_t len, const char *host, int port)
{
    bool v6 = strchr(host, ':') != NULL;
    snprintf(out, len, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

int rpc_parse_address_list(const char *text, struct rpc_address *out, size_t max, size_t *n,
                           char *err, size_t errlen)
{
    *n = 0;
    if (text == NULL || *text == '\0')
        return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address: none given");
    if (strlen(text) >= RPC_ADDRESS_LIST_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "bad address list: longer than %d characters", RPC_ADDRESS_LIST_MAX - 1);
    if (max > RPC_MAX_ADDRESSES)
        max = RPC_MAX_ADDRESSES;
    if (strchr(text, ',') == NULL) {
        /* One address: exactly what rpc_parse_address says, so its messages stay. */
        int rc =
            rpc_parse_address(text, out[0].host, sizeof out[0].host, &out[0].port, err, errlen);
        if (rc != 0)
            return rc;
        rpc_format_address(out[0].text, sizeof out[0].text, out[0].host, out[0].port);
        *n = 1;
        return 0;
    }
    const char *p = text;
    if (strncmp(p, SCHEME, strlen(SCHEME)) == 0)
        p += strlen(SCHEME);
    size_t count = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && is_blank(*b))
            b++;
        while (e > b && is_blank(e[-1]))
            e--;
        if (b == e)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "bad address list '%s': address %zu is empty", text, count + 1);
        if (count == max)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "bad address list '%s': more than %zu addresses", text, max);
        if ((size_t)(e - b) >= strlen(SCHEME) && strncmp(b, SCHEME, strlen(SCHEME)) == 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "bad address list '%s': address %zu: sluice:// goes once, before the "
                           "list",
                           text, count + 1);
        char element[RPC_ADDRESS_LIST_MAX], why[512];
        memcpy(element, b, (size_t)(e - b));
        element[e - b] = '\0';
        struct rpc_address *a = &out[count];
        if (rpc_parse_address(element, a->host, sizeof a->host, &a->port, why, sizeof why) != 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address list '%s': %s", text, why);
        rpc_format_address(a->text, sizeof a->text, a->host, a->port);
        for (size_t i = 0; i < count; i++) {
            if (out[i].port == a->port && strcasecmp(out[i].host, a->host) == 0)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "bad address list '%s': %s is listed twice", text, a->text);
        }
        count++;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *n = count;
    return 0;
}

void rpc_format_address_list(char *out, size_t len, const struct rpc_address *list, size_t n)
{
    if (len == 0)
        return;
    out[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < n && used < len; i++) {
        int w = snprintf(out + used, len - used, "%s%s", i ? "," : "", list[i].text);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

uint64_t rpc_new_incarnation(void)
{
    uint64_t value = 0;
    /* Synchronous (no loop, no callback); it reads the kernel's random source. If that fails,
     * the clock and the address of a stack variable still tell restarts apart. */
    while (value == 0) {
        if (uv_random(NULL, NULL, &value, sizeof value, 0, NULL) != 0)
            value = uv_hrtime() ^ ((uint64_t)(uintptr_t)&value << 16);
    }
    return value;
}
