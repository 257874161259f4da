/* Objects read over HTTP: s3:// objects of S3 and S3-compatible stores, and http:// and
 * https:// URLs, through libcurl (docs/pipelines.md "Object stores and HTTP").
 *
 * An open object is read front to back in ranged GETs of a fixed size (SLUICE_OBJECT_RANGE_BYTES,
 * default 8 MiB), two of them in flight: while the reader consumes one range, two threads of its
 * own fetch the next two (three ranges of memory per reader, at most). The first answer's ETag is
 * sent as If-Match on every later range, so an object replaced while it is read is an error naming
 * it, never a mix of versions. A request that fails with 429, 500, 502, 503, 504, a reset, a short
 * body or a timeout is retried after a jittered exponential backoff, resuming at the first byte not
 * yet received, until a deadline per request (SLUICE_OBJECT_RETRY_MS, default 60000 ms) runs out;
 * 403, 404 and other answers fail at once with the server's error text. Each thread keeps one curl
 * handle, whose connections stay open from one request to the next.
 *
 * s3:// requests are signed (SigV4, by libcurl) with the credentials of the standard AWS
 * environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else of the shared
 * credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials; profile
 * AWS_PROFILE, default "default"), else sent unsigned (anonymous). The region is AWS_REGION or
 * AWS_DEFAULT_REGION (default us-east-1); AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL names an
 * S3-compatible service, addressed path-style (ENDPOINT/BUCKET/KEY); otherwise
 * https://BUCKET.s3.REGION.amazonaws.com/KEY. Credentials are read by each process for itself
 * and never appear in a message.
 *
 * Every function may be called from any thread but blocks on the network, so never from a libuv
 * loop thread. Messages never hold credentials. */
#ifndef SLUICE_PIPELINE_OBJSTORE_H
#define SLUICE_PIPELINE_OBJSTORE_H

#include "objurl.h"

#include "common/error.h"
#include "common/obj_metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The defaults of the environment settings above. */
#define OBJ_DEFAULT_RANGE_BYTES (8u << 20)
#define OBJ_DEFAULT_RETRY_MS 60000u
/* The bounds of the settings. */
#define OBJ_MIN_RANGE_BYTES 4096u
#define OBJ_MAX_RANGE_BYTES (1u << 30)
#define OBJ_MAX_RETRY_MS (24u * 3600u * 1000u)

/* Sets this process's settings, as its flags (--object-retry-ms, --object-range-bytes) give
 * them; 0 leaves one to the environment (SLUICE_OBJECT_RETRY_MS, SLUICE_OBJECT_RANGE_BYTES) or
 * its default. Readers opened afterwards use them. Any thread; usually main, at start. */
void obj_configure(uint32_t retry_ms, uint32_t range_bytes);

/* How a reader learns that its read was cancelled: cancelled(arg) is called, from the reading
 * thread, while a request is in flight and while it waits to retry; once it returns true the
 * request ends within about 50 ms with SLUICE_ERR_CANCELLED. */
struct obj_cancel {
    bool (*cancelled)(const void *arg);
    const void *arg;
};

struct obj_reader;

/* Opens the object url (obj_url_check must accept it) and fetches its first range, which gives
 * its size and ETag. A pinned url (obj_pin_parse) sends the listed ETag as If-Match from the
 * first request and must have the listed size: otherwise SLUICE_ERR_CORRUPT, "URL: changed
 * since it was listed (...)". Returns 0 with *out set (close with obj_close), or a negative code
 * with "URL: reason" in err: SLUICE_ERR_NOT_FOUND (404), SLUICE_ERR_DENIED (401, 403),
 * SLUICE_ERR_UNAVAILABLE or SLUICE_ERR_TIMEOUT (retries ran out), SLUICE_ERR_INVALID,
 * SLUICE_ERR_PROTOCOL (an answer that makes no sense, or a server that ignores Range for an
 * object larger than one range), SLUICE_ERR_CANCELLED (cancel said so; NULL: never),
 * SLUICE_ERR_NOMEM. */
int obj_open(const char *url, const struct obj_cancel *cancel, struct obj_reader **out, char *err,
             size_t errlen);

/* As obj_open, for an object read at random (obj_pread: Parquet footers and column chunks): the
 * first request asks for only OBJ_MIN_RANGE_BYTES. */
int obj_open_random(const char *url, const struct obj_cancel *cancel, struct obj_reader **out,
                    char *err, size_t errlen);

/* Reads up to len bytes at the reader's position into dst and advances it. Returns the count
 * (0 at the end of the object) or a negative code with the reason in err, without the URL and
 * offset, which the caller knows: SLUICE_ERR_CORRUPT for an object that changed since it was
 * opened ("changed while being read (ETag ...)"), else as obj_open. */
ssize_t obj_read(struct obj_reader *r, void *dst, size_t len, char *err, size_t errlen);

/* Reads len bytes at offset off (random access, for Parquet footers and pages) into dst.
 * Returns 0, SLUICE_ERR_TRUNCATED when the object ends first, or as obj_read. Does not move the
 * reader's position. A read shorter than min(range, 1 MiB) is served from one of four windows of
 * that size the reader keeps (fetched on a miss, least recently used replaced; a window near the
 * end ends at the end), a longer one straight into dst: at most 4 MiB more per reader. */
int obj_pread(struct obj_reader *r, void *dst, size_t len, uint64_t off, char *err, size_t errlen);

/* The URL the reader reads, without a pin (objurl.h); valid until obj_close. */
const char *obj_url(const struct obj_reader *r);

/* The object's size in bytes, known once it is open. */
uint64_t obj_size(const struct obj_reader *r);

/* The object's ETag as its first answer gave it (quoted, as the server sends it), or as its pin
 * named it; "" when the server sent none. Valid until obj_close. With obj_size and
 * obj_pin_format it pins the version being read, for readers that open the object again. */
const char *obj_etag(const struct obj_reader *r);

/* Ends the reader's read-ahead (a request in flight stops at libcurl's next progress call, within
 * about a second), joins its threads and frees r. NULL is allowed. */
void obj_close(struct obj_reader *r);

/* Expands an s3:// glob ("s3://BUCKET/PREFIX*.txt"; a literal key matches itself) by one
 * paginated ListObjectsV2 walk over the key's literal prefix (obj_glob_prefix_len), matching
 * keys with fnmatch(3) and FNM_PATHNAME as a local glob matches names. Appends each matching
 * object's URL pinned to its size and ETag ("s3://BUCKET/KEY#object=SIZE:ETAG", objurl.h) to
 * *urls (grown with realloc; *n and *cap as for
 * obj_list_parse). Returns the number of objects appended (0: none matched) or a negative code
 * with "URL: reason" in err. */
int obj_glob(const char *url, char ***urls, size_t *n, size_t *cap, char *err, size_t errlen);

/* Puts the s3:// object url whole: one PUT of data[0, len) with its SHA-256 (which the server
 * checks) in x-amz-content-sha256, signed as a GET is, retried on the same answers as a GET
 * (from its first byte) until the same deadline. An object already there is replaced. Returns 0
 * or a negative code with "URL: reason" in err, as obj_open (a missing bucket: SLUICE_ERR_NOT_FOUND
 * with the server's NoSuchBucket text). */
int obj_put(const char *url, const void *data, size_t len, char *err, size_t errlen);

/* Deletes the s3:// object url (one DELETE, retried as obj_put; an object that is not there is
 * no failure). Returns 0 or a negative code with "URL: reason" in err, as obj_put. */
int obj_delete(const char *url, char *err, size_t errlen);

/* Copies what this process's requests have done so far into out (about 10 KB), for its
 * metrics (common/obj_metrics.h). Any thread; never blocks. */
void obj_stats(struct obj_stats *out);

/* Why a read through an obj_fopen stream failed (the stream itself says only EIO): its code
 * (0 while none failed), the offset, and the reason. */
struct obj_fail {
    int code;
    uint64_t at;
    char why[SLUICE_ERRMSG_SIZE];
};

/* A read-only stdio stream over r (fopencookie): front to back it reads with obj_read (with its
 * read-ahead), elsewhere with obj_pread; fclose closes r. A failed read records its reason in
 * *fail, which must outlive the stream. NULL when out of memory (r is then still the caller's). */
FILE *obj_fopen(struct obj_reader *r, struct obj_fail *fail);

#endif
