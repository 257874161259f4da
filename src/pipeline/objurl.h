/* Object URLs: the pure part of reading objects (objstore.h). Pure: no I/O, no environment.
 *
 * A file source may name, besides local paths, objects by URL: "s3://BUCKET/KEY" (a key may
 * hold a glob over the part after its last literal prefix, expanded by a listing) and explicit
 * "http://HOST/PATH" or "https://HOST/PATH" (taken literally, never globbed). These functions
 * classify and parse such URLs, judge them against data roots, build S3 request URLs and parse
 * ListObjectsV2 answers. Any thread may call them. */
#ifndef SLUICE_PIPELINE_OBJURL_H
#define SLUICE_PIPELINE_OBJURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum obj_scheme {
    OBJ_NONE = 0, /* not a URL: a local path */
    OBJ_S3,
    OBJ_HTTP,
    OBJ_HTTPS,
    OBJ_BAD /* "SCHEME://..." with a scheme we do not read */
};

/* What a string names: OBJ_NONE for a path without "://" in its first component, OBJ_S3,
 * OBJ_HTTP or OBJ_HTTPS for those schemes (case-sensitive, as written), OBJ_BAD for any other
 * "SCHEME://" (letters, digits, '+', '-', '.' before "://"). */
enum obj_scheme obj_url_scheme(const char *s);

/* Whether s names an object (s3, http or https) or a URL of a bad scheme: anything that must
 * not be taken for a local path. */
static inline bool obj_is_url(const char *s)
{
    return obj_url_scheme(s) != OBJ_NONE;
}

/* An s3:// URL split: the bucket and the key (both malloc'd, NUL-terminated; the key may be
 * empty). */
struct obj_s3_url {
    char *bucket;
    char *key;
};

/* Checks a URL a source or a data root names. Refused (SLUICE_ERR_INVALID with a one-line
 * reason in err, naming url): a bad scheme ("ftp://x: unsupported URL scheme 'ftp' (expected
 * s3://, https:// or http://)"), an s3:// URL without a bucket, or a bucket that is not 3-63 of
 * [a-z0-9.-], an http(s) URL without a host, any URL with a control character, space or
 * backslash, or with a "." or ".." path segment (also percent-encoded), which a server or a
 * client might fold and so reach outside a data root. Returns 0 when url is acceptable. */
int obj_url_check(const char *url, char *err, size_t errlen);

/* Splits an s3:// URL that obj_url_check accepted into out (release with obj_s3_url_free).
 * Returns 0, SLUICE_ERR_INVALID or SLUICE_ERR_NOMEM. */
int obj_s3_url_parse(const char *url, struct obj_s3_url *out);
void obj_s3_url_free(struct obj_s3_url *u);

/* The length of the literal prefix of a key glob: the bytes before its first metacharacter
 * (* ? [ or a backslash); strlen(key) for a literal key. A listing with this prefix sees every
 * key the glob can match. */
size_t obj_glob_prefix_len(const char *key);

/* The normal form of a data-root URL written into out: the URL without trailing slashes
 * ("s3://b/data/" -> "s3://b/data"; "s3://b/" -> "s3://b"). Returns 0, SLUICE_ERR_INVALID
 * (obj_url_check's message in err) or SLUICE_ERR_TOO_LARGE. */
int obj_root_normalize(const char *url, char *out, size_t outlen, char *err, size_t errlen);

/* Whether url lies within root (a URL in obj_root_normalize's form): equal to it, or below it
 * by whole path segments, so "s3://b/allowed" covers "s3://b/allowed/x" but not
 * "s3://b/allowedX/y". A URL never lies within a local path, nor a path within a URL. */
static inline bool obj_url_within(const char *url, const char *root)
{
    size_t n = 0;
    while (root[n] && url[n] == root[n])
        n++;
    if (root[n] != '\0')
        return false;
    /* "s3://b" must not cover "s3://bb/x": the root's end is a segment's end. */
    return url[n] == '\0' || url[n] == '/';
}

/* Appends the percent-encoding of s[0, len) to out (of outlen bytes, NUL-terminated), leaving
 * unreserved characters (A-Z a-z 0-9 - _ . ~) and, when keep_slash, '/' as they are: the S3
 * encoding of a key in a path (keep_slash) or of a query value. Returns 0 or
 * SLUICE_ERR_TOO_LARGE. */
int obj_encode(const char *s, size_t len, bool keep_slash, char *out, size_t outlen);

/* A listed object is named by its URL pinned to what the listing saw: "URL#object=SIZE:ETAG",
 * the ETag percent-encoded (obj_encode, so it holds no '#'). The dispatcher's listing hands
 * these to workers in the dataset's definition and split plan; a reader of a pinned URL sends
 * If-Match with the ETag from its first request and checks the size, so an object replaced
 * after it was listed is an error naming it. The mark is searched from the end: a key may hold
 * '#'. */
#define OBJ_PIN_MARK "#object="

/* The pinned form of url (malloc'd into *out). etag may be "" (none). Returns 0 or
 * SLUICE_ERR_NOMEM. */
int obj_pin_format(const char *url, uint64_t size, const char *etag, char **out);

/* What a pinned URL says. */
struct obj_pin {
    size_t url_len; /* the URL's length without the pin */
    bool pinned;    /* whether there is a pin; the fields below are set only then */
    uint64_t size;
    char etag[256]; /* decoded, NUL-terminated; "" for none */
};

/* Parses s: with no well-formed pin (OBJ_PIN_MARK, decimal size, ':', an encoded ETag of at most
 * 255 bytes at the end), pin->pinned is false and url_len is strlen(s). Pure. */
void obj_pin_parse(const char *s, struct obj_pin *pin);

/* Whether s is a pinned URL (obj_pin_parse). */
bool obj_is_pinned(const char *s);

/* One object of a listing. */
struct obj_entry {
    char *key;
    uint64_t size;
    char *etag; /* as the server quotes it, e.g. "\"9b2cf5...\"" */
};

/* One page of a ListObjectsV2 answer parsed from xml[0, len): its entries appended to
 * *entries (grown with realloc; *n counts them, *cap its capacity), and, when the answer says
 * IsTruncated, its NextContinuationToken in *next (malloc'd; NULL when the listing is
 * complete). XML entities in keys and tokens are decoded. Returns 0, SLUICE_ERR_PROTOCOL with
 * the reason in err for an answer that is not a listing, or SLUICE_ERR_NOMEM. */
int obj_list_parse(const char *xml, size_t len, struct obj_entry **entries, size_t *n, size_t *cap,
                   char **next, char *err, size_t errlen);
void obj_entries_free(struct obj_entry *entries, size_t n);

/* The error of an S3-style XML error body, "CODE: MESSAGE" (either may be absent), or else the
 * body's first line, written into out (cut to fit, control characters dropped). Empty when the
 * body says nothing. */
void obj_error_text(const char *body, size_t len, char *out, size_t outlen);

#endif
