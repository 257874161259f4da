/* Scraping a metrics endpoint in integration tests: one HTTP request over a plain TCP socket,
 * and a strict parser of the Prometheus text format that checks what a scraper relies on. Every
 * wait is bounded. Nothing here asserts; failures come back as -1 with a message. */
#ifndef SLUICE_TESTS_LIB_SCRAPE_H
#define SLUICE_TESTS_LIB_SCRAPE_H

#include <stddef.h>

/* Connects to addr (HOST:PORT, IPv4), sends request as it is, and reads the response until the
 * server closes the connection, at most timeout_ms in all. Returns 0 with *response (malloc'd,
 * NUL-terminated), or -1. */
int scrape_request(const char *addr, const char *request, int timeout_ms, char **response);

/* The status code of a response ("HTTP/1.1 404 Not Found" gives 404), or -1. */
int scrape_status(const char *response);

/* The body of a response (after the empty line), or NULL. */
const char *scrape_body(const char *response);

/* One sample line. labels is the label pairs in canonical form (name="value" joined by commas,
 * escapes kept as written) without the le label, which is in le (NULL when absent). */
struct expo_sample {
    char *name;
    char *labels;
    char *le;
    double value;
};

struct expo {
    struct expo_sample *v;
    size_t n;
};

/* Parses an exposition and checks it: every line is "# HELP name text", "# TYPE name type" or a
 * sample "name{labels} value" (labels optional, value a number, +Inf, -Inf or NaN, no timestamp),
 * the text ends in a newline; every sample belongs to a family whose HELP and TYPE came before it
 * (a histogram's samples are NAME_bucket, NAME_sum, NAME_count), no family is declared twice;
 * per histogram series the buckets have increasing bounds ending in +Inf, cumulative counts,
 * and the +Inf bucket equals NAME_count, which is present with NAME_sum. Returns 0 with *out (free
 * it with expo_free), or -1 with a message naming the line. */
int expo_parse(const char *text, struct expo *out, char *err, size_t errlen);
void expo_free(struct expo *e);

/* The value of the sample with this name and labels (canonical form, "" for none; le not
 * included). Returns 0 with *out, or -1 when there is no such sample. */
int expo_value(const struct expo *e, const char *name, const char *labels, double *out);

/* GET /metrics from addr, expects 200 and parses the body. Returns 0 with *out, or -1 with a
 * message. */
int scrape_metrics(const char *addr, struct expo *out, char *err, size_t errlen);

#endif
