#include "lib/scrape.h"

#include "lib/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int connect_to(const char *addr)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int scrape_request(const char *addr, const char *request, int timeout_ms, char **response)
{
    long long deadline = now_ms() + timeout_ms;
    int fd = connect_to(addr);
    if (fd < 0)
        return -1;
    size_t len = strlen(request), off = 0;
    while (off < len) {
        ssize_t n = send(fd, request + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    size_t cap = 65536, have = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return -1;
    }
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (have + 4096 + 1 > cap) {
            char *p = realloc(buf, cap * 2);
            if (!p)
                break;
            buf = p;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + have, cap - have - 1, 0);
        if (n == 0) {
            close(fd);
            buf[have] = 0;
            *response = buf;
            return 0;
        }
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0)
            have += (size_t)n;
    }
    close(fd);
    free(buf);
    return -1;
}

int scrape_status(const char *response)
{
    int code;
    if (sscanf(response, "HTTP/1.%*d %3d ", &code) != 1)
        return -1;
    return code;
}

const char *scrape_body(const char *response)
{
    const char *p = strstr(response, "\r\n\r\n");
    return p ? p + 4 : NULL;
}

/* ---- the text format ------------------------------------------------------------------------- */

struct family {
    char *name;
    char type[16];
    bool help;
};

struct parser {
    struct family *fams;
    size_t nfams;
    struct expo *out;
    int line;
    char *err;
    size_t errlen;
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d: %s", p->line, msg);
    return -1;
}

static bool name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

/* The length of the metric name at s (0 when there is none). */
static size_t name_len(const char *s)
{
    if (!name_start(*s))
        return 0;
    size_t n = 1;
    while (name_char(s[n]))
        n++;
    return n;
}

static struct family *find_family(struct parser *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->nfams; i++)
        if (strlen(p->fams[i].name) == len && memcmp(p->fams[i].name, name, len) == 0)
            return &p->fams[i];
    return NULL;
}

static struct family *add_family(struct parser *p, const char *name, size_t len)
{
    struct family *v = realloc(p->fams, (p->nfams + 1) * sizeof(*v));
    if (!v)
        return NULL;
    p->fams = v;
    struct family *f = &v[p->nfams++];
    memset(f, 0, sizeof(*f));
    f->name = strndup(name, len);
    return f->name ? f : NULL;
}

static bool parse_value(const char *s, double *out)
{
    if (strcmp(s, "+Inf") == 0) {
        *out = INFINITY;
        return true;
    }
    if (strcmp(s, "-Inf") == 0) {
        *out = -INFINITY;
        return true;
    }
    if (strcmp(s, "NaN") == 0) {
        *out = NAN;
        return true;
    }
    if (!*s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9') || *s == '.'))
        return false;
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return *end == 0 && errno == 0;
}

static int parse_comment(struct parser *p, const char *line)
{
    bool help = strncmp(line, "# HELP ", 7) == 0;
    bool type = strncmp(line, "# TYPE ", 7) == 0;
    if (!help && !type)
        return 0; /* a plain comment */
    const char *name = line + 7;
    size_t n = name_len(name);
    if (n == 0 || (name[n] != ' ' && name[n] != 0))
        return fail(p, "bad metric name in '%s'", line);
    struct family *f = find_family(p, name, n);
    if (!f && !(f = add_family(p, name, n)))
        return fail(p, "out of memory");
    if (help) {
        if (f->help)
            return fail(p, "second HELP for %s", f->name);
        f->help = true;
        return 0;
    }
    if (f->type[0])
        return fail(p, "second TYPE for %s", f->name);
    const char *t = name[n] ? name + n + 1 : "";
    if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
        strcmp(t, "summary") && strcmp(t, "untyped"))
        return fail(p, "unknown type '%s'", t);
    snprintf(f->type, sizeof(f->type), "%s", t);
    return 0;
}

/* Parses {name="value",...} at *s, leaving *s after the brace. */
static int parse_labels(struct parser *p, const char **s, char *canon, size_t canonlen, char **le)
{
    const char *q = *s + 1;
    size_t clen = 0;
    canon[0] = 0;
    while (*q != '}') {
        /* Label names are metric names without colons. */
        size_t n = name_len(q);
        if (n == 0 || memchr(q, ':', n) || q[n] != '=' || q[n + 1] != '"')
            return fail(p, "bad label at '%s'", q);
        const char *lname = q;
        q += n + 2;
        const char *vstart = q;
        while (*q && *q != '"') {
            if (*q == '\\') {
                if (q[1] != '\\' && q[1] != '"' && q[1] != 'n')
                    return fail(p, "bad escape in a label value");
                q++;
            }
            q++;
        }
        if (*q != '"')
            return fail(p, "unterminated label value");
        size_t vlen = (size_t)(q - vstart);
        q++;
        if (n == 2 && memcmp(lname, "le", 2) == 0) {
            *le = strndup(vstart, vlen);
        } else {
            int w = snprintf(canon + clen, canonlen - clen, "%s%.*s=\"%.*s\"", clen ? "," : "",
                             (int)n, lname, (int)vlen, vstart);
            if (w < 0 || (size_t)w >= canonlen - clen)
                return fail(p, "labels too long");
            clen += (size_t)w;
        }
        if (*q == ',')
            q++;
        else if (*q != '}')
            return fail(p, "expected ',' or '}' after a label");
    }
    *s = q + 1;
    return 0;
}

static int parse_sample(struct parser *p, const char *line)
{
    size_t n = name_len(line);
    if (n == 0)
        return fail(p, "not a sample: '%s'", line);
    const char *s = line + n;
    char canon[1024] = "";
    char *le = NULL;
    if (*s == '{' && parse_labels(p, &s, canon, sizeof(canon), &le) < 0)
        return -1;
    if (*s != ' ') {
        free(le);
        return fail(p, "expected a space before the value in '%s'", line);
    }
    double v;
    if (!parse_value(s + 1, &v)) {
        free(le);
        return fail(p, "bad value in '%s'", line);
    }
    /* The family: the name itself, or a histogram's NAME_bucket, NAME_sum, NAME_count. */
    struct family *f = find_family(p, line, n);
    if (!f || !f->type[0]) {
        static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
        for (size_t i = 0; i < 3 && (!f || !f->type[0]); i++) {
            size_t k = strlen(suffixes[i]);
            if (n > k && memcmp(line + n - k, suffixes[i], k) == 0) {
                struct family *h = find_family(p, line, n - k);
                if (h && strcmp(h->type, "histogram") == 0)
                    f = h;
            }
        }
    }
    if (!f || !f->type[0] || !f->help) {
        free(le);
        return fail(p, "sample '%.*s' without HELP and TYPE before it", (int)n, line);
    }
    bool histogram = strcmp(f->type, "histogram") == 0;
    if (histogram && n == strlen(f->name)) {
        free(le);
        return fail(p, "histogram %s has a sample of its bare name", f->name);
    }
    bool bucket = histogram && n == strlen(f->name) + 7;
    if (bucket != (le != NULL)) {
        free(le);
        return fail(p, "le label %s", bucket ? "missing on a bucket" : "outside a bucket");
    }
    struct expo *e = p->out;
    struct expo_sample *vv = realloc(e->v, (e->n + 1) * sizeof(*vv));
    if (!vv) {
        free(le);
        return fail(p, "out of memory");
    }
    e->v = vv;
    struct expo_sample *x = &e->v[e->n++];
    x->name = strndup(line, n);
    x->labels = strdup(canon);
    x->le = le;
    x->value = v;
    return x->name && x->labels ? 0 : fail(p, "out of memory");
}

/* Checks every histogram series: increasing bounds, cumulative counts, +Inf last and equal to
 * NAME_count, NAME_sum present. */
static int check_histograms(struct parser *p)
{
    p->line = 0;
    for (size_t fi = 0; fi < p->nfams; fi++) {
        struct family *f = &p->fams[fi];
        if (strcmp(f->type, "histogram") != 0)
            continue;
        char bucket[256], sum[256], count[256];
        snprintf(bucket, sizeof(bucket), "%s_bucket", f->name);
        snprintf(sum, sizeof(sum), "%s_sum", f->name);
        snprintf(count, sizeof(count), "%s_count", f->name);
        for (size_t i = 0; i < p->out->n; i++) {
            const struct expo_sample *c = &p->out->v[i];
            if (strcmp(c->name, count) != 0)
                continue;
            double prev_le = -INFINITY, prev = 0, inf = NAN, s;
            size_t nb = 0;
            for (size_t j = 0; j < p->out->n; j++) {
                const struct expo_sample *b = &p->out->v[j];
                if (strcmp(b->name, bucket) != 0 || strcmp(b->labels, c->labels) != 0)
                    continue;
                double le;
                if (!parse_value(b->le, &le) || !(le > prev_le))
                    return fail(p, "%s{%s}: bucket bounds not increasing at le=\"%s\"", f->name,
                                c->labels, b->le);
                if (b->value < prev)
                    return fail(p, "%s{%s}: bucket counts not cumulative at le=\"%s\"", f->name,
                                c->labels, b->le);
                prev_le = le;
                prev = b->value;
                if (isinf(le))
                    inf = b->value;
                nb++;
            }
            if (nb == 0 || !isinf(prev_le))
                return fail(p, "%s{%s}: no +Inf bucket", f->name, c->labels);
            if (inf != c->value)
                return fail(p, "%s{%s}: +Inf bucket %g but count %g", f->name, c->labels, inf,
                            c->value);
            if (expo_value(p->out, sum, c->labels, &s) < 0)
                return fail(p, "%s{%s}: no _sum", f->name, c->labels);
        }
    }
    return 0;
}

int expo_parse(const char *text, struct expo *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    struct parser p = {.out = out, .err = err, .errlen = errlen};
    int rc = 0;
    size_t len = strlen(text);
    if (len > 0 && text[len - 1] != '\n')
        rc = fail(&p, "the text does not end in a newline");
    char *copy = strdup(text);
    if (!copy)
        rc = -1;
    char *save = NULL;
    for (char *line = rc == 0 ? strtok_r(copy, "\n", &save) : NULL; line && rc == 0;
         line = strtok_r(NULL, "\n", &save)) {
        p.line++;
        rc = line[0] == '#' ? parse_comment(&p, line) : parse_sample(&p, line);
    }
    /* strtok_r skips empty lines; they are not in the format either. */
    if (rc == 0 && (text[0] == '\n' || strstr(text, "\n\n")))
        rc = fail(&p, "an empty line");
    if (rc == 0)
        rc = check_histograms(&p);
    free(copy);
    for (size_t i = 0; i < p.nfams; i++)
        free(p.fams[i].name);
    free(p.fams);
    if (rc < 0)
        expo_free(out);
    return rc;
}

void expo_free(struct expo *e)
{
    for (size_t i = 0; i < e->n; i++) {
        free(e->v[i].name);
        free(e->v[i].labels);
        free(e->v[i].le);
    }
    free(e->v);
    memset(e, 0, sizeof(*e));
}

int expo_value(const struct expo *e, const char *name, const char *labels, double *out)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->v[i].name, name) == 0 && strcmp(e->v[i].labels, labels) == 0 && !e->v[i].le) {
            *out = e->v[i].value;
            return 0;
        }
    }
    return -1;
}

int scrape_metrics(const char *addr, struct expo *out, char *err, size_t errlen)
{
    char *resp = NULL;
    if (scrape_request(addr, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n", 10000, &resp) < 0) {
        snprintf(err, errlen, "GET http://%s/metrics failed", addr);
        return -1;
    }
    int rc = -1;
    const char *body = scrape_body(resp);
    if (scrape_status(resp) != 200 || !body)
        snprintf(err, errlen, "GET http://%s/metrics: %.60s", addr, resp);
    else
        rc = expo_parse(body, out, err, errlen);
    free(resp);
    return rc;
}
