#include "metrics.h"

#include "error.h"

#include <assert.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metrics {
    struct metrics_family *head, *tail; /* in the order they were made */
};

struct metrics_family {
    struct metrics_family *next;
    struct metrics_series *head, *tail; /* in the order they were made */
    enum metrics_type type;
    enum metrics_kind kind; /* meaningful for counters and gauges */
    size_t nbounds;
    double *bounds; /* histograms only; finite, strictly increasing */
    char *name;
    char *help;
    /* The series indexed by their label sets: chains of hnext in index[hash & (nindex - 1)],
     * nindex a power of two (0 until the first series), grown to keep chains short. The hash is
     * keyed by seed, which differs between processes, so a peer that chooses label values (a
     * worker's address) cannot prepare values that collide. */
    struct metrics_series **index;
    size_t nindex, nseries;
    uint64_t seed;
};

struct metrics_series {
    struct metrics_family *family;
    struct metrics_series *prev, *next;
    struct metrics_series *hnext; /* the family's index chain */
    uint64_t hash;
    size_t nlabels;
    struct metrics_label *labels; /* points into the same allocation, strings too */
    union {
        uint64_t u;
        double d;
    } value;
    double sum;        /* histograms */
    uint64_t count;    /* histograms */
    uint64_t *buckets; /* histograms: nbounds + 1 counts, not cumulative; the last is +Inf */
    /* Not histograms: "NAME{labels} " as rendered (malloc'd, prefix_len bytes), made once. */
    char *prefix;
    size_t prefix_len;
};

static void series_free(struct metrics_series *s)
{
    free(s->prefix);
    free(s);
}

static char *sample_prefix(const struct metrics_series *s, size_t *len);

/* ---- validation ------------------------------------------------------------------------------ */

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool valid_metric_name(const char *s)
{
    if (s == NULL || !(is_alpha(s[0]) || s[0] == ':'))
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!(is_alpha(*p) || is_digit(*p) || *p == ':'))
            return false;
    return true;
}

static bool valid_label_name(const char *s)
{
    if (s == NULL || !is_alpha(s[0]) || (s[0] == '_' && s[1] == '_'))
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!(is_alpha(*p) || is_digit(*p)))
            return false;
    return true;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool valid_utf8(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        size_t n;
        unsigned cp, min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            /* A NUL here is not a continuation byte, so the scan never passes the end. */
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* Label names are valid and distinct, values are UTF-8; histograms keep "le" for themselves. */
static bool valid_labels(const struct metrics_family *f, const struct metrics_label *labels,
                         size_t nlabels)
{
    if (nlabels > 0 && labels == NULL)
        return false;
    for (size_t i = 0; i < nlabels; i++) {
        if (!valid_label_name(labels[i].name) || labels[i].value == NULL ||
            !valid_utf8(labels[i].value))
            return false;
        if (f->type == METRICS_HISTOGRAM && strcmp(labels[i].name, "le") == 0)
            return false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i].name, labels[j].name) == 0)
                return false;
    }
    return true;
}

static const char *const scalar_suffixes[] = {""};
static const char *const histogram_suffixes[] = {"_bucket", "_sum", "_count"};

static const char *const *sample_suffixes(enum metrics_type type, size_t *n)
{
    if (type == METRICS_HISTOGRAM) {
        *n = sizeof histogram_suffixes / sizeof histogram_suffixes[0];
        return histogram_suffixes;
    }
    *n = 1;
    return scalar_suffixes;
}

/* Whether a1 followed by a2 is the same string as b1 followed by b2, without building either. */
static bool concat_equal(const char *a1, const char *a2, const char *b1, const char *b2)
{
    for (;;) {
        if (*a1 == '\0' && a2 != NULL) {
            a1 = a2;
            a2 = NULL;
            continue;
        }
        if (*b1 == '\0' && b2 != NULL) {
            b1 = b2;
            b2 = NULL;
            continue;
        }
        if (*a1 != *b1)
            return false;
        if (*a1 == '\0')
            return true;
        a1++;
        b1++;
    }
}

/* Whether a family (name, type) would share its name or a sample name with g. */
static bool clashes(const struct metrics_family *g, const char *name, enum metrics_type type)
{
    if (strcmp(g->name, name) == 0)
        return true;
    size_t na, nb;
    const char *const *sa = sample_suffixes(type, &na);
    const char *const *sb = sample_suffixes(g->type, &nb);
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (concat_equal(name, sa[i], g->name, sb[j]))
                return true;
    return false;
}

/* ---- registry and families ------------------------------------------------------------------- */

int metrics_create(struct metrics **out)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return SLUICE_ERR_NOMEM;
    *out = m;
    return 0;
}

static void free_family(struct metrics_family *f)
{
    struct metrics_series *s = f->head;
    while (s) {
        struct metrics_series *next = s->next;
        series_free(s);
        s = next;
    }
    free(f->index);
    free(f->bounds);
    free(f->name);
    free(f->help);
    free(f);
}

void metrics_destroy(struct metrics *m)
{
    if (m == NULL)
        return;
    struct metrics_family *f = m->head;
    while (f) {
        struct metrics_family *next = f->next;
        free_family(f);
        f = next;
    }
    free(m);
}

static int add_family(struct metrics *m, enum metrics_type type, enum metrics_kind kind,
                      const char *name, const char *help, const double *bounds, size_t nbounds,
                      struct metrics_family **out)
{
    if (help == NULL)
        help = "";
    if (!valid_metric_name(name) || !valid_utf8(help))
        return SLUICE_ERR_INVALID;
    if (kind != METRICS_U64 && kind != METRICS_DOUBLE)
        return SLUICE_ERR_INVALID;
    if (nbounds > METRICS_MAX_BUCKETS || (nbounds > 0 && bounds == NULL))
        return SLUICE_ERR_INVALID;
    for (size_t i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return SLUICE_ERR_INVALID;
    for (const struct metrics_family *g = m->head; g; g = g->next)
        if (clashes(g, name, type))
            return SLUICE_ERR_EXISTS;

    int rc = SLUICE_ERR_NOMEM;
    struct metrics_family *f = calloc(1, sizeof *f);
    if (f == NULL)
        goto fail;
    f->type = type;
    f->kind = kind;
    /* Address-space layout randomization makes these differ from process to process; the
     * library stays pure (no system call). */
    f->seed = ((uint64_t)(uintptr_t)f * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&add_family ^
              ((uint64_t)(uintptr_t)&f << 17);
    f->name = strdup(name);
    if (f->name == NULL)
        goto fail_family;
    f->help = strdup(help);
    if (f->help == NULL)
        goto fail_family;
    if (nbounds > 0) {
        f->bounds = malloc(nbounds * sizeof *f->bounds);
        if (f->bounds == NULL)
            goto fail_family;
        memcpy(f->bounds, bounds, nbounds * sizeof *f->bounds);
    }
    f->nbounds = nbounds;
    if (m->tail)
        m->tail->next = f;
    else
        m->head = f;
    m->tail = f;
    *out = f;
    return 0;

fail_family:
    free_family(f);
fail:
    return rc;
}

int metrics_counter(struct metrics *m, const char *name, const char *help, enum metrics_kind kind,
                    struct metrics_family **out)
{
    return add_family(m, METRICS_COUNTER, kind, name, help, NULL, 0, out);
}

int metrics_gauge(struct metrics *m, const char *name, const char *help, enum metrics_kind kind,
                  struct metrics_family **out)
{
    return add_family(m, METRICS_GAUGE, kind, name, help, NULL, 0, out);
}

int metrics_histogram(struct metrics *m, const char *name, const char *help, const double *bounds,
                      size_t nbounds, struct metrics_family **out)
{
    return add_family(m, METRICS_HISTOGRAM, METRICS_U64, name, help, bounds, nbounds, out);
}

int metrics_scalar(struct metrics *m, bool counter, const char *name, const char *help,
                   enum metrics_kind kind, struct metrics_series **out)
{
    struct metrics_family *f;
    int rc =
        counter ? metrics_counter(m, name, help, kind, &f) : metrics_gauge(m, name, help, kind, &f);
    return rc < 0 ? rc : metrics_series_get(f, NULL, 0, out);
}

int metrics_exponential_buckets(double start, double factor, size_t count, double *out)
{
    if (!(start > 0) || !(factor > 1) || count < 1 || count > METRICS_MAX_BUCKETS ||
        !isfinite(start) || !isfinite(factor))
        return SLUICE_ERR_INVALID;
    double b = start;
    for (size_t i = 0; i < count; i++) {
        out[i] = b;
        b *= factor;
    }
    return 0;
}

/* ---- series ---------------------------------------------------------------------------------- */

static bool has_label(const struct metrics_series *s, const char *name, const char *value)
{
    for (size_t i = 0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0)
            return strcmp(s->labels[i].value, value) == 0;
    return false;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t str_hash(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return h * 0x100000001b3ull; /* the terminator: "a" "bc" and "ab" "c" differ */
}

/* A hash of a label set that does not depend on the labels' order (a sum over the pairs). */
static uint64_t labels_hash(const struct metrics_family *f, const struct metrics_label *labels,
                            size_t nlabels)
{
    uint64_t h = mix64(f->seed ^ nlabels);
    for (size_t i = 0; i < nlabels; i++)
        h += mix64(str_hash(str_hash(f->seed, labels[i].name), labels[i].value));
    return h;
}

/* Links s into f's index, doubling the index when it holds more series than slots. */
static int index_add(struct metrics_family *f, struct metrics_series *s)
{
    if (f->nseries + 1 > f->nindex) {
        size_t n = f->nindex ? f->nindex * 2 : 16;
        struct metrics_series **tab = calloc(n, sizeof *tab);
        if (tab == NULL)
            return SLUICE_ERR_NOMEM;
        for (size_t i = 0; i < f->nindex; i++)
            for (struct metrics_series *x = f->index[i], *next; x; x = next) {
                next = x->hnext;
                x->hnext = tab[x->hash & (n - 1)];
                tab[x->hash & (n - 1)] = x;
            }
        free(f->index);
        f->index = tab;
        f->nindex = n;
    }
    struct metrics_series **slot = &f->index[s->hash & (f->nindex - 1)];
    s->hnext = *slot;
    *slot = s;
    f->nseries++;
    return 0;
}

static void index_remove(struct metrics_family *f, struct metrics_series *s)
{
    struct metrics_series **p = &f->index[s->hash & (f->nindex - 1)];
    while (*p != s)
        p = &(*p)->hnext;
    *p = s->hnext;
    f->nseries--;
}

struct metrics_series *metrics_series_find(const struct metrics_family *f,
                                           const struct metrics_label *labels, size_t nlabels)
{
    if (!valid_labels(f, labels, nlabels) || f->nindex == 0)
        return NULL;
    uint64_t h = labels_hash(f, labels, nlabels);
    /* Names are distinct on both sides, so equal counts and every pair found mean equal sets. */
    for (struct metrics_series *s = f->index[h & (f->nindex - 1)]; s; s = s->hnext) {
        if (s->hash != h || s->nlabels != nlabels)
            continue;
        size_t i = 0;
        while (i < nlabels && has_label(s, labels[i].name, labels[i].value))
            i++;
        if (i == nlabels)
            return s;
    }
    return NULL;
}

int metrics_series_get(struct metrics_family *f, const struct metrics_label *labels, size_t nlabels,
                       struct metrics_series **out)
{
    if (!valid_labels(f, labels, nlabels))
        return SLUICE_ERR_INVALID;
    struct metrics_series *s = metrics_series_find(f, labels, nlabels);
    if (s) {
        *out = s;
        return 0;
    }

    /* One allocation: the series, its label array, its buckets, then the label strings. Each
     * part before the strings is a multiple of 8 bytes, so every part is aligned. */
    size_t nbuckets = f->type == METRICS_HISTOGRAM ? f->nbounds + 1 : 0;
    size_t size = sizeof *s + nlabels * sizeof(struct metrics_label) + nbuckets * sizeof(uint64_t);
    size_t strings = 0;
    for (size_t i = 0; i < nlabels; i++)
        strings += strlen(labels[i].name) + 1 + strlen(labels[i].value) + 1;
    s = calloc(1, size + strings);
    if (s == NULL)
        return SLUICE_ERR_NOMEM;
    s->family = f;
    s->nlabels = nlabels;
    s->labels = (struct metrics_label *)(s + 1);
    s->buckets = nbuckets ? (uint64_t *)(s->labels + nlabels) : NULL;
    char *p = (char *)s + size;
    for (size_t i = 0; i < nlabels; i++) {
        size_t n = strlen(labels[i].name) + 1;
        memcpy(p, labels[i].name, n);
        s->labels[i].name = p;
        p += n;
        n = strlen(labels[i].value) + 1;
        memcpy(p, labels[i].value, n);
        s->labels[i].value = p;
        p += n;
    }
    s->hash = labels_hash(f, labels, nlabels);
    if ((f->type != METRICS_HISTOGRAM && !(s->prefix = sample_prefix(s, &s->prefix_len))) ||
        index_add(f, s) != 0) {
        series_free(s);
        return SLUICE_ERR_NOMEM;
    }
    s->prev = f->tail;
    if (f->tail)
        f->tail->next = s;
    else
        f->head = s;
    f->tail = s;
    *out = s;
    return 0;
}

void metrics_series_remove(struct metrics_series *s)
{
    struct metrics_family *f = s->family;
    index_remove(f, s);
    if (s->prev)
        s->prev->next = s->next;
    else
        f->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        f->tail = s->prev;
    series_free(s);
}

size_t metrics_remove_label(struct metrics *m, const char *name, const char *value)
{
    size_t removed = 0;
    for (struct metrics_family *f = m->head; f; f = f->next) {
        struct metrics_series *s = f->head;
        while (s) {
            struct metrics_series *next = s->next;
            if (has_label(s, name, value)) {
                metrics_series_remove(s);
                removed++;
            }
            s = next;
        }
    }
    return removed;
}

/* ---- updates --------------------------------------------------------------------------------- */

static bool is_scalar(const struct metrics_series *s, enum metrics_kind kind)
{
    return s->family->type != METRICS_HISTOGRAM && s->family->kind == kind;
}

/* A call on the wrong type or kind is a programmer error: it asserts in debug builds and changes
 * nothing in release builds, so a misused series never has its bits reinterpreted. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            assert(!"metrics: wrong type or kind for this call");                                  \
            return __VA_ARGS__;                                                                    \
        }                                                                                          \
    } while (0)

void metrics_add_u64(struct metrics_series *s, uint64_t n)
{
    REQUIRE(is_scalar(s, METRICS_U64));
    s->value.u += n;
}

void metrics_sub_u64(struct metrics_series *s, uint64_t n)
{
    REQUIRE(is_scalar(s, METRICS_U64) && s->family->type == METRICS_GAUGE);
    s->value.u = s->value.u > n ? s->value.u - n : 0;
}

void metrics_set_u64(struct metrics_series *s, uint64_t v)
{
    REQUIRE(is_scalar(s, METRICS_U64));
    s->value.u = v;
}

void metrics_add_double(struct metrics_series *s, double v)
{
    REQUIRE(is_scalar(s, METRICS_DOUBLE));
    if (s->family->type == METRICS_COUNTER && !(v >= 0))
        return;
    s->value.d += v;
}

void metrics_set_double(struct metrics_series *s, double v)
{
    REQUIRE(is_scalar(s, METRICS_DOUBLE));
    s->value.d = v;
}

void metrics_observe(struct metrics_series *s, double v)
{
    const struct metrics_family *f = s->family;
    REQUIRE(f->type == METRICS_HISTOGRAM);
    if (isnan(v))
        return;
    size_t i = 0;
    while (i < f->nbounds && v > f->bounds[i])
        i++;
    s->buckets[i]++;
    s->count++;
    s->sum += v;
}

uint64_t metrics_get_u64(const struct metrics_series *s)
{
    if (s->family->type == METRICS_HISTOGRAM)
        return s->count;
    REQUIRE(s->family->kind == METRICS_U64, 0);
    return s->value.u;
}

double metrics_get_double(const struct metrics_series *s)
{
    if (s->family->type == METRICS_HISTOGRAM)
        return s->sum;
    REQUIRE(s->family->kind == METRICS_DOUBLE, 0);
    return s->value.d;
}

/* ---- rendering ------------------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed; everything after is dropped */
};

static void buf_put(struct buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Writes s with backslash and newline escaped, and the double quote too when quote is set. */
static void buf_escaped(struct buf *b, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (*s == '"' && quote)
            esc = "\\\"";
        if (esc) {
            buf_put(b, run, (size_t)(s - run));
            buf_str(b, esc);
            run = s + 1;
        }
    }
    buf_put(b, run, (size_t)(s - run));
}

/* The shortest digits that read back as v, laid out the way the reference Prometheus client lays
 * out floats: exponent form when the decimal exponent is below -4 or at least 6, plain form
 * otherwise ("20", "0.0001", "123456.7", "1e+06", "1.234567e+06", "2.5e-07"). Agreeing on the
 * layout matters for histogram bounds: the le label is text, so "1e+06" and "1000000" would be two
 * different series to a server that merges them. */
static void format_double(char *out, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(out, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Whole numbers in the plain range (counts, zero rates: most samples) need no search. */
    if (fabs(v) < 1e6 && v == (double)(int64_t)v && !(v == 0 && signbit(v))) {
        snprintf(out, len, "%" PRId64, (int64_t)v);
        return;
    }
    /* The fewest significant digits that read back exactly. A normal double carries every
     * decimal of at most 15 significant digits (DBL_DIG): such a decimal is what its nearest
     * double prints as at 15 digits. So when 15 digits read back, the shortest form is those
     * digits without their trailing zeros; else 16 digits may do, and 17 always do: at most three
     * tries. Subnormals carry fewer digits: a binary search (if d digits read back, so do more). */
    int digits;
    if (fabs(v) >= DBL_MIN) {
        digits = 15;
        snprintf(out, len, "%.*e", digits - 1, v);
        if (strtod(out, NULL) == v) {
            const char *last = strchr(out, 'e') - 1; /* the last digit of the mantissa */
            while (digits > 1 && *last == '0') {
                digits--;
                last--;
            }
        } else {
            digits = 16;
            snprintf(out, len, "%.*e", digits - 1, v);
            if (strtod(out, NULL) != v)
                digits = 17;
        }
    } else {
        int lo = 1, hi = 17;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            snprintf(out, len, "%.*e", mid - 1, v);
            if (strtod(out, NULL) == v)
                hi = mid;
            else
                lo = mid + 1;
        }
        digits = lo;
    }
    snprintf(out, len, "%.*e", digits - 1, v);
    int exp = atoi(strchr(out, 'e') + 1);
    if (exp < -4 || exp >= 6)
        return;
    int decimals = digits - 1 - exp;
    snprintf(out, len, "%.*f", decimals > 0 ? decimals : 0, v);
}

static void buf_double(struct buf *b, double v)
{
    char tmp[40];
    format_double(tmp, sizeof tmp, v);
    buf_str(b, tmp);
}

static void buf_u64(struct buf *b, uint64_t v)
{
    char tmp[24];
    char *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    buf_put(b, p, (size_t)(tmp + sizeof tmp - p));
}

/* NAME SUFFIX{labels[,le="LE"]} and a space: everything before the value. */
static void buf_sample_name(struct buf *b, const struct metrics_series *s, const char *suffix,
                            const char *le)
{
    buf_str(b, s->family->name);
    buf_str(b, suffix);
    if (s->nlabels == 0 && le == NULL) {
        buf_str(b, " ");
        return;
    }
    buf_str(b, "{");
    for (size_t i = 0; i < s->nlabels; i++) {
        if (i > 0)
            buf_str(b, ",");
        buf_str(b, s->labels[i].name);
        buf_str(b, "=\"");
        buf_escaped(b, s->labels[i].value, true);
        buf_str(b, "\"");
    }
    if (le) {
        buf_str(b, s->nlabels ? ",le=\"" : "le=\"");
        buf_str(b, le);
        buf_str(b, "\"");
    }
    buf_str(b, "} ");
}

static char *sample_prefix(const struct metrics_series *s, size_t *len)
{
    struct buf b = {0};
    buf_sample_name(&b, s, "", NULL);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    char *fit = realloc(b.p, b.len + 1); /* the buffer starts at 4 KiB */
    return fit ? fit : b.p;
}

static void render_histogram(struct buf *b, const struct metrics_series *s)
{
    const struct metrics_family *f = s->family;
    uint64_t cumulative = 0;
    char le[40];
    for (size_t i = 0; i <= f->nbounds; i++) {
        cumulative += s->buckets[i];
        if (i < f->nbounds)
            format_double(le, sizeof le, f->bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        buf_sample_name(b, s, "_bucket", le);
        buf_u64(b, cumulative);
        buf_str(b, "\n");
    }
    buf_sample_name(b, s, "_sum", NULL);
    buf_double(b, s->sum);
    buf_str(b, "\n");
    buf_sample_name(b, s, "_count", NULL);
    buf_u64(b, s->count);
    buf_str(b, "\n");
}

static const char *type_name(enum metrics_type type)
{
    switch (type) {
    case METRICS_COUNTER:
        return "counter";
    case METRICS_GAUGE:
        return "gauge";
    case METRICS_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* One piece of a frozen registry: text[off, off + len), then, unless kind is NONE, a number and a
 * newline. */
enum piece_kind { PIECE_NONE, PIECE_U64, PIECE_DOUBLE };

struct piece {
    size_t off, len;
    enum piece_kind kind;
    union {
        uint64_t u;
        double d;
    } v;
};

struct metrics_frozen {
    struct buf text;
    struct piece *v;
    size_t n, cap;
    bool failed;
};

/* Ends a piece at the text's current end: the text since the last piece, and the number. */
static void frozen_piece(struct metrics_frozen *f, enum piece_kind kind, uint64_t u, double d)
{
    if (f->failed || f->text.failed) {
        f->failed = true;
        return;
    }
    size_t start = f->n ? f->v[f->n - 1].off + f->v[f->n - 1].len : 0;
    if (kind == PIECE_NONE && f->n && f->v[f->n - 1].kind == PIECE_NONE) {
        f->v[f->n - 1].len = f->text.len - f->v[f->n - 1].off; /* text after text: one piece */
        return;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 256;
        struct piece *v = realloc(f->v, cap * sizeof *v);
        if (!v) {
            f->failed = true;
            return;
        }
        f->v = v;
        f->cap = cap;
    }
    struct piece *p = &f->v[f->n++];
    *p = (struct piece){.off = start, .len = f->text.len - start, .kind = kind};
    if (kind == PIECE_U64)
        p->v.u = u;
    else
        p->v.d = d;
}

int metrics_freeze(const struct metrics *m, struct metrics_frozen **out)
{
    struct metrics_frozen *f = calloc(1, sizeof *f);
    if (!f)
        return SLUICE_ERR_NOMEM;
    /* Sized first (a walk of the lists), so the copy is one allocation of each, not a series of
     * reallocations copying megabytes at thousands of series. */
    size_t text = 1, pieces = 0;
    for (const struct metrics_family *fam = m->head; fam; fam = fam->next) {
        if (fam->head == NULL)
            continue;
        text += 2 * strlen(fam->name) + 2 * strlen(fam->help) + 32;
        pieces += 1;
        for (const struct metrics_series *s = fam->head; s; s = s->next) {
            if (fam->type == METRICS_HISTOGRAM)
                text += (fam->nbounds + 3) * (strlen(fam->name) + 64 + 32 * s->nlabels);
            else
                text += s->prefix_len;
            pieces += 2;
        }
    }
    struct buf *b = &f->text;
    b->p = malloc(text);
    f->v = malloc(pieces * sizeof *f->v);
    if (!b->p || !f->v) {
        metrics_frozen_free(f);
        return SLUICE_ERR_NOMEM;
    }
    b->cap = text;
    f->cap = pieces;
    buf_put(b, "", 0);
    for (const struct metrics_family *fam = m->head; fam; fam = fam->next) {
        if (fam->head == NULL)
            continue;
        if (fam->help[0]) {
            buf_str(b, "# HELP ");
            buf_str(b, fam->name);
            buf_str(b, " ");
            buf_escaped(b, fam->help, false);
            buf_str(b, "\n");
        }
        buf_str(b, "# TYPE ");
        buf_str(b, fam->name);
        buf_str(b, " ");
        buf_str(b, type_name(fam->type));
        buf_str(b, "\n");
        frozen_piece(f, PIECE_NONE, 0, 0);
        for (const struct metrics_series *s = fam->head; s; s = s->next) {
            /* Histograms are few: rendered whole now. */
            if (fam->type == METRICS_HISTOGRAM) {
                render_histogram(b, s);
                frozen_piece(f, PIECE_NONE, 0, 0);
                continue;
            }
            buf_put(b, s->prefix, s->prefix_len);
            if (fam->kind == METRICS_U64)
                frozen_piece(f, PIECE_U64, s->value.u, 0);
            else
                frozen_piece(f, PIECE_DOUBLE, 0, s->value.d);
        }
    }
    if (f->failed) {
        metrics_frozen_free(f);
        return SLUICE_ERR_NOMEM;
    }
    *out = f;
    return 0;
}

int metrics_frozen_render(const struct metrics_frozen *f, char **out, size_t *len)
{
    struct buf b = {0};
    /* The text and about 12 bytes a number: one allocation for most renders. */
    size_t want = f->text.len + 12 * f->n + 1;
    b.p = malloc(want);
    if (!b.p)
        return SLUICE_ERR_NOMEM;
    b.cap = want;
    buf_put(&b, "", 0);
    for (size_t i = 0; i < f->n; i++) {
        const struct piece *p = &f->v[i];
        buf_put(&b, f->text.p + p->off, p->len);
        if (p->kind == PIECE_NONE)
            continue;
        if (p->kind == PIECE_U64)
            buf_u64(&b, p->v.u);
        else
            buf_double(&b, p->v.d);
        buf_str(&b, "\n");
    }
    if (b.failed) {
        free(b.p);
        return SLUICE_ERR_NOMEM;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

void metrics_frozen_free(struct metrics_frozen *f)
{
    if (!f)
        return;
    free(f->text.p);
    free(f->v);
    free(f);
}

int metrics_render(const struct metrics *m, char **out, size_t *len)
{
    struct metrics_frozen *f;
    int rc = metrics_freeze(m, &f);
    if (rc < 0)
        return rc;
    rc = metrics_frozen_render(f, out, len);
    metrics_frozen_free(f);
    return rc;
}
