/* Object URLs (objurl.h): classification, checks, encoding and ListObjectsV2 parsing. Pure. */
#include "objurl.h"

#include "common/error.h"
#include "common/hex.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum obj_scheme obj_url_scheme(const char *s)
{
    size_t n = 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '+' || s[n] == '-' || s[n] == '.')
        n++;
    if (n == 0 || strncmp(s + n, "://", 3) != 0 || !isalpha((unsigned char)s[0]))
        return OBJ_NONE;
    if (n == 2 && strncmp(s, "s3", 2) == 0)
        return OBJ_S3;
    if (n == 4 && strncmp(s, "http", 4) == 0)
        return OBJ_HTTP;
    if (n == 5 && strncmp(s, "https", 5) == 0)
        return OBJ_HTTPS;
    return OBJ_BAD;
}

/* Whether the segment seg[0, len) is "." or "..", also written with %2e / %2E. */
static bool dot_segment(const char *seg, size_t len)
{
    size_t dots = 0;
    for (size_t i = 0; i < len;) {
        if (seg[i] == '.') {
            i++;
        } else if (seg[i] == '%' && i + 2 < len + 0 && seg[i + 1] == '2' &&
                   (seg[i + 2] == 'e' || seg[i + 2] == 'E')) {
            i += 3;
        } else {
            return false;
        }
        dots++;
    }
    return dots == 1 || dots == 2;
}

int obj_url_check(const char *url, char *err, size_t errlen)
{
    enum obj_scheme sc = obj_url_scheme(url);
    if (sc == OBJ_NONE)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not a URL", url);
    if (sc == OBJ_BAD)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: unsupported URL scheme '%.*s' (expected s3://, https:// or http://)",
                       url, (int)(strstr(url, "://") - url), url);
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '\\')
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: a URL may not hold spaces, control characters or backslashes", url);
    const char *host = strstr(url, "://") + 3;
    size_t hlen = strcspn(host, "/?#");
    if (sc == OBJ_S3) {
        if (hlen < 3 || hlen > 63)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: expected s3://BUCKET/KEY with a bucket of 3 to 63 characters", url);
        for (size_t i = 0; i < hlen; i++)
            if (!(islower((unsigned char)host[i]) || isdigit((unsigned char)host[i]) ||
                  host[i] == '-' || host[i] == '.'))
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "%s: a bucket name holds only a-z, 0-9, '-' and '.'", url);
        if (host[hlen] == '?' || host[hlen] == '#')
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: expected s3://BUCKET/KEY", url);
    } else if (hlen == 0) {
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: a URL without a host", url);
    }
    /* The path's segments, up to a query or fragment (s3 keys have neither). */
    const char *p = host + hlen;
    const char *end = sc == OBJ_S3 ? p + strlen(p) : p + strcspn(p, "?#");
    while (p < end) {
        p++; /* the slash */
        size_t len = strcspn(p, "/");
        if (p + len > end)
            len = (size_t)(end - p);
        if (dot_segment(p, len))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: a URL may not hold '.' or '..' path segments", url);
        p += len;
    }
    return 0;
}

int obj_s3_url_parse(const char *url, struct obj_s3_url *out)
{
    memset(out, 0, sizeof *out);
    if (obj_url_scheme(url) != OBJ_S3)
        return SLUICE_ERR_INVALID;
    const char *host = url + 5;
    size_t hlen = strcspn(host, "/");
    out->bucket = strndup(host, hlen);
    out->key = strdup(host[hlen] ? host + hlen + 1 : "");
    if (!out->bucket || !out->key) {
        obj_s3_url_free(out);
        return SLUICE_ERR_NOMEM;
    }
    return 0;
}

void obj_s3_url_free(struct obj_s3_url *u)
{
    free(u->bucket);
    free(u->key);
    u->bucket = u->key = NULL;
}

size_t obj_glob_prefix_len(const char *key)
{
    return strcspn(key, "*?[\\");
}

int obj_root_normalize(const char *url, char *out, size_t outlen, char *err, size_t errlen)
{
    int rc = obj_url_check(url, err, errlen);
    if (rc < 0)
        return rc;
    size_t n = strlen(url);
    const char *host = strstr(url, "://") + 3;
    while (n > (size_t)(host - url) && url[n - 1] == '/')
        n--;
    if (n + 1 > outlen)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "%s: too long", url);
    memcpy(out, url, n);
    out[n] = '\0';
    return 0;
}

int obj_encode(const char *s, size_t len, bool keep_slash, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t at = strlen(out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain =
            isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        if (at + (plain ? 1 : 3) + 1 > outlen)
            return SLUICE_ERR_TOO_LARGE;
        if (plain) {
            out[at++] = (char)c;
        } else {
            out[at++] = '%';
            out[at++] = hex[c >> 4];
            out[at++] = hex[c & 15];
        }
    }
    out[at] = '\0';
    return 0;
}

/* ---- Pinned URLs ------------------------------------------------------------------------ */

int obj_pin_format(const char *url, uint64_t size, const char *etag, char **out)
{
    char enc[3 * 256 + 1] = "";
    size_t elen = strlen(etag);
    if (elen > 255 || obj_encode(etag, elen, false, enc, sizeof enc) < 0)
        enc[0] = '\0'; /* an ETag too long to keep: read without If-Match */
    if (asprintf(out, "%s" OBJ_PIN_MARK "%" PRIu64 ":%s", url, size, enc) < 0) {
        *out = NULL;
        return SLUICE_ERR_NOMEM;
    }
    return 0;
}

void obj_pin_parse(const char *s, struct obj_pin *pin)
{
    memset(pin, 0, sizeof *pin);
    size_t len = strlen(s), ml = strlen(OBJ_PIN_MARK);
    pin->url_len = len;
    const char *m = NULL;
    for (const char *p = strstr(s, OBJ_PIN_MARK); p; p = strstr(p + 1, OBJ_PIN_MARK))
        m = p;
    if (!m || m == s)
        return;
    const char *p = m + ml;
    uint64_t size = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits == 19)
            return;
        size = size * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0 || *p != ':')
        return;
    size_t w = 0;
    for (p++; *p; p++) {
        char c = *p;
        if (c == '%') {
            int a = hex_digit_value(p[1]), b = a < 0 ? -1 : hex_digit_value(p[2]);
            if (b < 0)
                return;
            c = (char)(a * 16 + b);
            p += 2;
        } else if (c == '#' || c == '/') {
            return;
        }
        if (w + 1 >= sizeof pin->etag || c == '\0')
            return;
        pin->etag[w++] = c;
    }
    pin->etag[w] = '\0';
    pin->url_len = (size_t)(m - s);
    pin->size = size;
    pin->pinned = true;
}

bool obj_is_pinned(const char *s)
{
    struct obj_pin pin;
    obj_pin_parse(s, &pin);
    return pin.pinned;
}

/* ---- XML --------------------------------------------------------------------------------- */

/* The text between <tag> and </tag> in [p, end), or NULL; *len is its length. */
static const char *xml_find(const char *p, const char *end, const char *tag, size_t *len)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    size_t ol = strlen(open), cl = strlen(close);
    for (const char *q = p; q + ol <= end; q++) {
        if (memcmp(q, open, ol) != 0)
            continue;
        const char *v = q + ol;
        for (const char *e = v; e + cl <= end; e++)
            if (memcmp(e, close, cl) == 0) {
                *len = (size_t)(e - v);
                return v;
            }
        return NULL;
    }
    return NULL;
}

/* A malloc'd copy of s[0, len) with the XML entities decoded (numeric ones in ASCII and UTF-8). */
static char *xml_text(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        if (s[i] != '&') {
            out[w++] = s[i++];
            continue;
        }
        static const struct {
            const char *name;
            char c;
        } ents[] = {
            {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        bool done = false;
        for (size_t k = 0; k < sizeof ents / sizeof ents[0] && !done; k++) {
            size_t el = strlen(ents[k].name);
            if (i + el <= len && memcmp(s + i, ents[k].name, el) == 0) {
                out[w++] = ents[k].c;
                i += el;
                done = true;
            }
        }
        if (!done && i + 3 < len && s[i + 1] == '#') {
            size_t j = i + 2;
            int base = 10;
            if (s[j] == 'x') {
                base = 16;
                j++;
            }
            unsigned long cp = 0;
            size_t digits = 0;
            while (j < len && isxdigit((unsigned char)s[j]) && digits < 8) {
                int d = isdigit((unsigned char)s[j]) ? s[j] - '0' : (tolower(s[j]) - 'a' + 10);
                if (d >= base)
                    break;
                cp = cp * (unsigned long)base + (unsigned long)d;
                j++;
                digits++;
            }
            if (digits && j < len && s[j] == ';' && cp > 0 && cp < 0x110000) {
                /* UTF-8 of cp is never longer than the entity that wrote it. */
                if (cp < 0x80) {
                    out[w++] = (char)cp;
                } else if (cp < 0x800) {
                    out[w++] = (char)(0xc0 | (cp >> 6));
                    out[w++] = (char)(0x80 | (cp & 0x3f));
                } else if (cp < 0x10000) {
                    out[w++] = (char)(0xe0 | (cp >> 12));
                    out[w++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                    out[w++] = (char)(0x80 | (cp & 0x3f));
                } else {
                    out[w++] = (char)(0xf0 | (cp >> 18));
                    out[w++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                    out[w++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                    out[w++] = (char)(0x80 | (cp & 0x3f));
                }
                i = j + 1;
                done = true;
            }
        }
        if (!done)
            out[w++] = s[i++];
    }
    out[w] = '\0';
    return out;
}

void obj_entries_free(struct obj_entry *entries, size_t n)
{
    for (size_t i = 0; entries && i < n; i++) {
        free(entries[i].key);
        free(entries[i].etag);
    }
    free(entries);
}

int obj_list_parse(const char *xml, size_t len, struct obj_entry **entries, size_t *n, size_t *cap,
                   char **next, char *err, size_t errlen)
{
    const char *end = xml + len;
    *next = NULL;
    size_t vl;
    if (!xml_find(xml, end, "ListBucketResult", &vl) && !memmem(xml, len, "<ListBucketResult", 17))
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "the answer is not a bucket listing");
    const char *p = xml;
    for (;;) {
        const char *c = memmem(p, (size_t)(end - p), "<Contents>", 10);
        if (!c)
            break;
        const char *ce = memmem(c, (size_t)(end - c), "</Contents>", 11);
        if (!ce)
            return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "a listing entry is cut short");
        size_t kl, sl, el = 0;
        const char *k = xml_find(c, ce, "Key", &kl);
        const char *s = xml_find(c, ce, "Size", &sl);
        const char *e = xml_find(c, ce, "ETag", &el);
        if (!k || !s)
            return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "a listing entry without Key or Size");
        uint64_t size = 0;
        if (sl == 0)
            return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "a listing entry's Size: ''");
        for (size_t i = 0; i < sl; i++) {
            if (!isdigit((unsigned char)s[i]) || size > (UINT64_MAX - 9) / 10)
                return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "a listing entry's Size: '%.*s'",
                               (int)(sl > 32 ? 32 : sl), s);
            size = size * 10 + (uint64_t)(s[i] - '0');
        }
        if (*n == *cap) {
            size_t ncap = *cap ? *cap * 2 : 64;
            struct obj_entry *ne = realloc(*entries, ncap * sizeof *ne);
            if (!ne)
                return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            *entries = ne;
            *cap = ncap;
        }
        struct obj_entry *o = &(*entries)[*n];
        o->key = xml_text(k, kl);
        o->etag = e ? xml_text(e, el) : strdup("");
        o->size = size;
        (*n)++;
        if (!o->key || !o->etag)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
        p = ce + 11;
    }
    size_t tl;
    const char *t = xml_find(xml, end, "IsTruncated", &tl);
    if (t && tl == 4 && memcmp(t, "true", 4) == 0) {
        size_t nl;
        const char *nt = xml_find(xml, end, "NextContinuationToken", &nl);
        if (!nt || nl == 0)
            return err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                           "a truncated listing without NextContinuationToken");
        if (!(*next = xml_text(nt, nl)))
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    }
    return 0;
}

/* Appends s[0, len) to out (at *at), dropping control characters and folding runs of white
 * space into one space. */
static void put_clean(char *out, size_t outlen, size_t *at, const char *s, size_t len)
{
    for (size_t i = 0; i < len && *at + 1 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
        if (c < 0x20 || c == 0x7f)
            continue;
        if (c == ' ' && (*at == 0 || out[*at - 1] == ' '))
            continue;
        out[(*at)++] = (char)c;
    }
    out[*at] = '\0';
}

void obj_error_text(const char *body, size_t len, char *out, size_t outlen)
{
    if (outlen == 0)
        return;
    out[0] = '\0';
    size_t at = 0, cl = 0, ml = 0;
    const char *end = body + len;
    const char *code = body ? xml_find(body, end, "Code", &cl) : NULL;
    const char *msg = body ? xml_find(body, end, "Message", &ml) : NULL;
    if (code || msg) {
        char *c = code ? xml_text(code, cl) : NULL;
        char *m = msg ? xml_text(msg, ml) : NULL;
        if (c)
            put_clean(out, outlen, &at, c, strlen(c));
        if (c && m)
            put_clean(out, outlen, &at, ": ", 2);
        if (m)
            put_clean(out, outlen, &at, m, strlen(m));
        free(c);
        free(m);
        return;
    }
    if (!body)
        return;
    size_t line = 0;
    while (line < len && body[line] != '\n')
        line++;
    put_clean(out, outlen, &at, body, line > 200 ? 200 : line);
    while (at > 0 && out[at - 1] == ' ')
        out[--at] = '\0';
}
