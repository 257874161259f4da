/* The parts of rpc.h that are not the server or the client: addresses and incarnations. The
 * server lives in rpc_server.c, the client in rpc_client.c, the connection they share in
 * conn.c. */
#include "rpc.h"

#include "error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
