#include "names.h"

#include "error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t name_char_len(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0)
        return 0;
    unsigned c = p[0];
    if (c < 0x80)
        return c < 0x20 || c == 0x7f ? 0 : 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0; /* a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF */
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    if (cp >= 0x80 && cp <= 0x9f)
        return 0; /* C1 controls */
    return len;
}

/* Whether the byte at s[0] starts a character that is valid UTF-8 but a control. */
static bool is_control(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x20 || p[0] == 0x7f)
        return true;
    return n >= 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
}

int name_check(const char *field, const char *s, size_t max, char *err, size_t errlen)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = name_char_len(s + i, n - i);
        if (k == 0) {
            if (is_control(s + i, n - i))
                return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: control character at byte %zu",
                               field, i);
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not valid UTF-8 at byte %zu",
                           field, i);
        }
        i += k;
    }
    if (n > max)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: %zu bytes, longer than the limit of %zu", field, n, max);
    return 0;
}

bool name_needs_escape(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = name_char_len(s + i, n - i);
        if (k == 0)
            return true;
        i += k;
    }
    return false;
}

size_t name_escape(const char *s, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s), o = 0;
    bool full = outlen == 0;
    for (size_t i = 0; i < n;) {
        size_t k = name_char_len(s + i, n - i);
        char esc[4];
        const char *piece = s + i;
        size_t plen = k;
        if (k == 0) {
            unsigned char b = (unsigned char)s[i];
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[b >> 4];
            esc[3] = hex[b & 15];
            piece = esc;
            plen = 4;
            k = 1;
        }
        if (!full && o + plen < outlen)
            memcpy(out + o, piece, plen);
        else if (!full) {
            out[o] = '\0';
            full = true;
        }
        o += plen;
        i += k;
    }
    if (!full)
        out[o] = '\0';
    return o;
}

char *name_escape_dup(const char *s)
{
    size_t need = name_escape(s, NULL, 0);
    char *out = malloc(need + 1);
    if (out)
        name_escape(s, out, need + 1);
    return out;
}
