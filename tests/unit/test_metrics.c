/* The metrics registry: whole rendered texts for every type and kind, label escaping, series
 * order and removal, histogram bucket edges, the number format, and every validation rule
 * (metric names, label names, UTF-8, sample-name clashes, bucket bounds). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/metrics.h"

/* Renders m and compares the whole text with want. */
static void assert_render(const struct metrics *m, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(metrics_render(m, &text, &len), 0);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    if (strcmp(text, want) != 0)
        fail_msg("rendered:\n%s\nwanted:\n%s", text, want);
    free(text);
}

static struct metrics *new_registry(void)
{
    struct metrics *m = NULL;
    assert_int_equal(metrics_create(&m), 0);
    return m;
}

static struct metrics_series *series0(struct metrics_family *f)
{
    struct metrics_series *s = NULL;
    assert_int_equal(metrics_series_get(f, NULL, 0, &s), 0);
    return s;
}

static struct metrics_series *series1(struct metrics_family *f, const char *name, const char *value)
{
    struct metrics_label l = {name, value};
    struct metrics_series *s = NULL;
    assert_int_equal(metrics_series_get(f, &l, 1, &s), 0);
    return s;
}

static void test_empty(void **state)
{
    struct metrics *m = new_registry();
    assert_render(m, "");
    /* Families without series render nothing either. */
    struct metrics_family *f;
    assert_int_equal(metrics_counter(m, "a_total", "A.", METRICS_U64, &f), 0);
    assert_int_equal(metrics_histogram(m, "h", "H.", NULL, 0, &f), 0);
    assert_render(m, "");
    metrics_destroy(m);
    metrics_destroy(NULL);
}

static void test_scalars(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *requests, *temperature, *busy, *workers;
    assert_int_equal(
        metrics_counter(m, "sluice_requests_total", "Requests served.", METRICS_U64, &requests), 0);
    assert_int_equal(metrics_gauge(m, "temperature", "", METRICS_DOUBLE, &temperature), 0);
    assert_int_equal(metrics_counter(m, "busy_seconds_total", NULL, METRICS_DOUBLE, &busy), 0);
    assert_int_equal(metrics_gauge(m, "sluice:workers", "Workers.", METRICS_U64, &workers), 0);

    struct metrics_series *r = series0(requests);
    struct metrics_series *t = series0(temperature);
    struct metrics_series *b = series0(busy);
    struct metrics_series *w = series0(workers);
    assert_render(m, "# HELP sluice_requests_total Requests served.\n"
                     "# TYPE sluice_requests_total counter\n"
                     "sluice_requests_total 0\n"
                     "# TYPE temperature gauge\n"
                     "temperature 0\n"
                     "# TYPE busy_seconds_total counter\n"
                     "busy_seconds_total 0\n"
                     "# HELP sluice:workers Workers.\n"
                     "# TYPE sluice:workers gauge\n"
                     "sluice:workers 0\n");

    metrics_add_u64(r, 1);
    metrics_add_u64(r, 41);
    metrics_set_double(t, -3.25);
    metrics_add_double(b, 0.1);
    metrics_add_double(b, 0.2);
    metrics_add_double(b, -5);  /* a counter never goes down by adding */
    metrics_add_double(b, NAN); /* nor turns NaN */
    metrics_set_u64(w, 7);
    metrics_sub_u64(w, 2);
    assert_int_equal(metrics_get_u64(r), 42);
    assert_int_equal(metrics_get_u64(w), 5);
    assert_true(metrics_get_double(t) == -3.25);
    assert_true(metrics_get_double(b) == 0.1 + 0.2);
    assert_render(m, "# HELP sluice_requests_total Requests served.\n"
                     "# TYPE sluice_requests_total counter\n"
                     "sluice_requests_total 42\n"
                     "# TYPE temperature gauge\n"
                     "temperature -3.25\n"
                     "# TYPE busy_seconds_total counter\n"
                     "busy_seconds_total 0.30000000000000004\n"
                     "# HELP sluice:workers Workers.\n"
                     "# TYPE sluice:workers gauge\n"
                     "sluice:workers 5\n");

    /* A u64 gauge stops at zero going down; adding wraps like unsigned arithmetic; the whole
     * 64-bit range prints exactly. */
    metrics_sub_u64(w, 6);
    assert_int_equal(metrics_get_u64(w), 0);
    metrics_set_u64(r, UINT64_MAX);
    metrics_set_double(t, INFINITY);
    assert_render(m, "# HELP sluice_requests_total Requests served.\n"
                     "# TYPE sluice_requests_total counter\n"
                     "sluice_requests_total 18446744073709551615\n"
                     "# TYPE temperature gauge\n"
                     "temperature +Inf\n"
                     "# TYPE busy_seconds_total counter\n"
                     "busy_seconds_total 0.30000000000000004\n"
                     "# HELP sluice:workers Workers.\n"
                     "# TYPE sluice:workers gauge\n"
                     "sluice:workers 0\n");
    metrics_add_u64(r, 2);
    assert_int_equal(metrics_get_u64(r), 1);
    metrics_destroy(m);
}

static void test_labels_and_escaping(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *f;
    assert_int_equal(metrics_gauge(m, "sluice_buffered", "Elements \\ waiting\nin \"buffers\".",
                                   METRICS_U64, &f),
                     0);
    struct metrics_label two[] = {{"task", "3"}, {"worker", "w:1"}};
    struct metrics_series *a = NULL, *b = NULL, *c = NULL, *again = NULL;
    assert_int_equal(metrics_series_get(f, two, 2, &a), 0);
    b = series1(f, "path", "a\"b\\c\nd");
    c = series1(f, "name", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* The same pairs in another order are the same series. */
    struct metrics_label swapped[] = {{"worker", "w:1"}, {"task", "3"}};
    assert_int_equal(metrics_series_get(f, swapped, 2, &again), 0);
    assert_ptr_equal(again, a);
    assert_ptr_equal(metrics_series_find(f, swapped, 2), a);
    /* A subset or a different value is another series. */
    assert_null(metrics_series_find(f, two, 1));
    struct metrics_label other[] = {{"task", "4"}, {"worker", "w:1"}};
    assert_null(metrics_series_find(f, other, 2));
    assert_null(metrics_series_find(f, NULL, 0));

    metrics_set_u64(a, 1);
    metrics_set_u64(b, 2);
    metrics_set_u64(c, 3);
    assert_render(m, "# HELP sluice_buffered Elements \\\\ waiting\\nin \"buffers\".\n"
                     "# TYPE sluice_buffered gauge\n"
                     "sluice_buffered{task=\"3\",worker=\"w:1\"} 1\n"
                     "sluice_buffered{path=\"a\\\"b\\\\c\\nd\"} 2\n"
                     "sluice_buffered{name=\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"} 3\n");
    metrics_destroy(m);
}

static void test_histogram(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *f, *plain;
    const double bounds[] = {0.005, 0.1, 1, 2.5, 1e6};
    assert_int_equal(metrics_histogram(m, "rpc_seconds", "RPC latency.", bounds, 5, &f), 0);
    assert_int_equal(metrics_histogram(m, "only_inf", "", NULL, 0, &plain), 0);
    struct metrics_series *get = series1(f, "method", "get");
    struct metrics_series *put = series1(f, "method", "put");
    struct metrics_series *p = series0(plain);

    /* A value equal to a bound counts in that bound's bucket; above the last it is +Inf only. */
    const double values[] = {0.005, 0.0051, 0.1, 1, 1.5, 2.5, 3, 1e6, 2e6, -1, NAN};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        metrics_observe(get, values[i]);
    metrics_observe(p, 4);
    metrics_observe(p, 0.5);
    assert_int_equal(metrics_get_u64(get), 10);
    assert_int_equal(metrics_get_u64(put), 0);
    assert_true(metrics_get_double(p) == 4.5);
    assert_render(m, "# HELP rpc_seconds RPC latency.\n"
                     "# TYPE rpc_seconds histogram\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"0.005\"} 2\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"0.1\"} 4\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"1\"} 5\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"2.5\"} 7\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"1e+06\"} 9\n"
                     "rpc_seconds_bucket{method=\"get\",le=\"+Inf\"} 10\n"
                     "rpc_seconds_sum{method=\"get\"} 3.0000071101e+06\n"
                     "rpc_seconds_count{method=\"get\"} 10\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"0.005\"} 0\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"0.1\"} 0\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"1\"} 0\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"2.5\"} 0\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"1e+06\"} 0\n"
                     "rpc_seconds_bucket{method=\"put\",le=\"+Inf\"} 0\n"
                     "rpc_seconds_sum{method=\"put\"} 0\n"
                     "rpc_seconds_count{method=\"put\"} 0\n"
                     "# TYPE only_inf histogram\n"
                     "only_inf_bucket{le=\"+Inf\"} 2\n"
                     "only_inf_sum 4.5\n"
                     "only_inf_count 2\n");
    metrics_destroy(m);
}

/* Infinite observations land in the first and the +Inf bucket and make the sum NaN, as IEEE
 * arithmetic says. */
static void test_histogram_sum_labels(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *f;
    const double bounds[] = {1};
    assert_int_equal(metrics_histogram(m, "h", "", bounds, 1, &f), 0);
    struct metrics_series *s = series1(f, "task", "7");
    metrics_observe(s, INFINITY);
    metrics_observe(s, -INFINITY);
    assert_render(m, "# TYPE h histogram\n"
                     "h_bucket{task=\"7\",le=\"1\"} 1\n"
                     "h_bucket{task=\"7\",le=\"+Inf\"} 2\n"
                     "h_sum{task=\"7\"} NaN\n"
                     "h_count{task=\"7\"} 2\n");
    metrics_destroy(m);
}

static void test_removal(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *elems, *buffered, *up;
    const double bounds[] = {1};
    struct metrics_family *lat;
    assert_int_equal(metrics_counter(m, "elements_total", "E.", METRICS_U64, &elems), 0);
    assert_int_equal(metrics_gauge(m, "buffered", "B.", METRICS_U64, &buffered), 0);
    assert_int_equal(metrics_histogram(m, "latency", "L.", bounds, 1, &lat), 0);
    assert_int_equal(metrics_gauge(m, "up", "U.", METRICS_U64, &up), 0);
    for (int t = 1; t <= 3; t++) {
        char id[8];
        snprintf(id, sizeof id, "%d", t);
        metrics_set_u64(series1(elems, "task", id), (uint64_t)t * 10);
        struct metrics_label l[] = {{"job", "j"}, {"task", id}};
        struct metrics_series *s;
        assert_int_equal(metrics_series_get(buffered, l, 2, &s), 0);
        metrics_set_u64(s, (uint64_t)t);
        metrics_observe(series1(lat, "task", id), 0.5);
    }
    metrics_set_u64(series0(up), 1);

    /* Task 2 ended: its series go from every family, the others stay in their order. */
    assert_int_equal(metrics_remove_label(m, "task", "2"), 3);
    assert_int_equal(metrics_remove_label(m, "task", "2"), 0);
    assert_int_equal(metrics_remove_label(m, "task", "9"), 0);
    assert_int_equal(metrics_remove_label(m, "nolabel", "1"), 0);
    assert_render(m, "# HELP elements_total E.\n"
                     "# TYPE elements_total counter\n"
                     "elements_total{task=\"1\"} 10\n"
                     "elements_total{task=\"3\"} 30\n"
                     "# HELP buffered B.\n"
                     "# TYPE buffered gauge\n"
                     "buffered{job=\"j\",task=\"1\"} 1\n"
                     "buffered{job=\"j\",task=\"3\"} 3\n"
                     "# HELP latency L.\n"
                     "# TYPE latency histogram\n"
                     "latency_bucket{task=\"1\",le=\"1\"} 1\n"
                     "latency_bucket{task=\"1\",le=\"+Inf\"} 1\n"
                     "latency_sum{task=\"1\"} 0.5\n"
                     "latency_count{task=\"1\"} 1\n"
                     "latency_bucket{task=\"3\",le=\"1\"} 1\n"
                     "latency_bucket{task=\"3\",le=\"+Inf\"} 1\n"
                     "latency_sum{task=\"3\"} 0.5\n"
                     "latency_count{task=\"3\"} 1\n"
                     "# HELP up U.\n"
                     "# TYPE up gauge\n"
                     "up 1\n");

    /* Removing one series by pointer: first, last and only series of a family. */
    metrics_series_remove(metrics_series_find(elems, &(struct metrics_label){"task", "1"}, 1));
    struct metrics_label l3[] = {{"task", "3"}, {"job", "j"}};
    metrics_series_remove(metrics_series_find(buffered, l3, 2));
    metrics_series_remove(series0(up));
    assert_int_equal(metrics_remove_label(m, "task", "1"), 2);
    assert_int_equal(metrics_remove_label(m, "task", "3"), 2);
    assert_render(m, "");

    /* A series made again after removal starts from zero and goes to the end. */
    struct metrics_series *again = series1(elems, "task", "1");
    assert_int_equal(metrics_get_u64(again), 0);
    metrics_set_u64(series1(elems, "task", "0"), 5);
    assert_render(m, "# HELP elements_total E.\n"
                     "# TYPE elements_total counter\n"
                     "elements_total{task=\"1\"} 0\n"
                     "elements_total{task=\"0\"} 5\n");
    metrics_destroy(m);
}

struct double_case {
    double v;
    const char *want;
};

static void test_number_format(void **state)
{
    static const struct double_case cases[] = {
        {0, "0"},
        {-0.0, "-0"},
        {1, "1"},
        {-1, "-1"},
        {0.1, "0.1"},
        {0.5, "0.5"},
        {1.0 / 3, "0.3333333333333333"},
        {2.0 / 3, "0.6666666666666666"},
        {123456, "123456"},
        {1e6, "1e+06"},
        {1234567, "1.234567e+06"},
        {20, "20"},
        {100000, "100000"},
        {123456.7, "123456.7"},
        {999999.5, "999999.5"},
        {999999, "999999"},
        {-999999, "-999999"},
        {-1e6, "-1e+06"},
        {1e-5, "1e-05"},
        {0.00012, "0.00012"},
        {-2.5e-7, "-2.5e-07"},
        {2.5e-7, "2.5e-07"},
        {1e-4, "0.0001"},
        {1e21, "1e+21"},
        {9007199254740993.0, "9.007199254740992e+15"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {5e-324, "5e-324"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct metrics *m = new_registry();
        struct metrics_family *f;
        assert_int_equal(metrics_gauge(m, "g", "", METRICS_DOUBLE, &f), 0);
        metrics_set_double(series0(f), cases[i].v);
        char want[128];
        snprintf(want, sizeof want, "# TYPE g gauge\ng %s\n", cases[i].want);
        assert_render(m, want);
        metrics_destroy(m);
    }
}

/* The layout by the plain definition: the fewest significant digits that read back, searched
 * one by one. */
static void reference_format(char *out, size_t len, double v)
{
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(out, len, "%.*e", digits - 1, v);
        if (strtod(out, NULL) == v)
            break;
    }
    snprintf(out, len, "%.*e", digits - 1, v);
    int exp = atoi(strchr(out, 'e') + 1);
    if (exp < -4 || exp >= 6)
        return;
    int decimals = digits - 1 - exp;
    snprintf(out, len, "%.*f", decimals > 0 ? decimals : 0, v);
}

/* Thousands of doubles of every magnitude (and whole numbers around the plain form's edge)
 * render as the one-by-one search lays them out. */
static void test_number_format_search(void **state)
{
    (void)state;
    struct metrics *m = new_registry();
    struct metrics_family *f;
    assert_int_equal(metrics_gauge(m, "g", "", METRICS_DOUBLE, &f), 0);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 6000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        switch (i % 5) {
        case 0: /* any finite bit pattern */
            memcpy(&v, &x, sizeof v);
            if (!isfinite(v))
                continue;
            break;
        case 1: /* rates: a few digits, then noise */
            v = (double)(x % 100000000u) / (double)(1u + x % 1000u);
            break;
        case 2: /* whole numbers near 10^6, both signs */
            v = (double)((int64_t)(x % 2000001u) - 1000000) * ((x >> 40) % 2 ? 1 : -1);
            break;
        case 3: /* short decimals */
            v = (double)(x % 100000u) / 1000.0;
            break;
        default: /* subnormals and the smallest normals (fewer digits than 15 read back) */
            v = ldexp((double)(x % 10000000u), -1074 + (int)((x >> 40) % 60));
            break;
        }
        metrics_set_double(series0(f), v);
        char num[64], want[128];
        reference_format(num, sizeof num, v);
        snprintf(want, sizeof want, "# TYPE g gauge\ng %s\n", num);
        assert_render(m, want);
    }
    metrics_destroy(m);
}

/* A frozen copy renders the registry as it was at the freeze, whatever happens to the registry
 * afterwards (values changed, series removed and added, the registry destroyed). */
static void test_frozen(void **state)
{
    (void)state;
    struct metrics *m = new_registry();
    struct metrics_family *c, *g, *h;
    assert_int_equal(metrics_counter(m, "c_total", "Counted \\ things.", METRICS_U64, &c), 0);
    assert_int_equal(metrics_gauge(m, "g", "", METRICS_DOUBLE, &g), 0);
    const double bounds[] = {0.5, 1e6};
    assert_int_equal(metrics_histogram(m, "h_seconds", "H.", bounds, 2, &h), 0);
    metrics_set_u64(series1(c, "worker", "1"), 7);
    metrics_set_u64(series1(c, "worker", "2"), 18446744073709551615u);
    metrics_set_double(series1(g, "job", "a\"b"), 0.1);
    metrics_set_double(series1(g, "job", "c"), -2.5e-7);
    metrics_observe(series0(h), 0.25);
    metrics_observe(series0(h), 3);
    const char *want = "# HELP c_total Counted \\\\ things.\n"
                       "# TYPE c_total counter\n"
                       "c_total{worker=\"1\"} 7\n"
                       "c_total{worker=\"2\"} 18446744073709551615\n"
                       "# TYPE g gauge\n"
                       "g{job=\"a\\\"b\"} 0.1\n"
                       "g{job=\"c\"} -2.5e-07\n"
                       "# HELP h_seconds H.\n"
                       "# TYPE h_seconds histogram\n"
                       "h_seconds_bucket{le=\"0.5\"} 1\n"
                       "h_seconds_bucket{le=\"1e+06\"} 2\n"
                       "h_seconds_bucket{le=\"+Inf\"} 2\n"
                       "h_seconds_sum 3.25\n"
                       "h_seconds_count 2\n";
    assert_render(m, want);
    struct metrics_frozen *f = NULL;
    assert_int_equal(metrics_freeze(m, &f), 0);
    metrics_set_u64(series1(c, "worker", "1"), 8);
    assert_int_equal(metrics_remove_label(m, "worker", "2"), 1);
    metrics_set_double(series1(g, "job", "d"), 1);
    metrics_observe(series0(h), 0.1);
    for (int round = 0; round < 2; round++) {
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(metrics_frozen_render(f, &text, &len), 0);
        assert_int_equal(len, strlen(text));
        assert_string_equal(text, want);
        free(text);
        metrics_destroy(m); /* the copy shares nothing with the registry */
        m = NULL;
    }
    metrics_frozen_free(f);
    metrics_frozen_free(NULL);
    /* An empty registry freezes and renders as "". */
    m = new_registry();
    assert_int_equal(metrics_freeze(m, &f), 0);
    char *text = NULL;
    size_t len = 1;
    assert_int_equal(metrics_frozen_render(f, &text, &len), 0);
    assert_string_equal(text, "");
    assert_int_equal(len, 0);
    free(text);
    metrics_frozen_free(f);
    metrics_destroy(m);
}

struct name_case {
    const char *name;
    int want;
};

static void test_metric_names(void **state)
{
    static const struct name_case cases[] = {
        {"a", 0},
        {"_", 0},
        {":", 0},
        {"sluice_elements_total", 0},
        {"a:b_c9", 0},
        {"A9", 0},
        {"", SLUICE_ERR_INVALID},
        {"9a", SLUICE_ERR_INVALID},
        {"a-b", SLUICE_ERR_INVALID},
        {"a b", SLUICE_ERR_INVALID},
        {"a.b", SLUICE_ERR_INVALID},
        {"caf\xc3\xa9", SLUICE_ERR_INVALID},
        {"a{b}", SLUICE_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct metrics *m = new_registry();
        struct metrics_family *f = NULL;
        int rc = metrics_counter(m, cases[i].name, "", METRICS_U64, &f);
        if (rc != cases[i].want)
            fail_msg("name \"%s\": %d, want %d", cases[i].name, rc, cases[i].want);
        metrics_destroy(m);
    }
    struct metrics *m = new_registry();
    struct metrics_family *f = NULL;
    assert_int_equal(metrics_counter(m, NULL, "", METRICS_U64, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_counter(m, "ok", "bad \xff help", METRICS_U64, &f),
                     SLUICE_ERR_INVALID);
    assert_int_equal(metrics_gauge(m, "ok", "", (enum metrics_kind)7, &f), SLUICE_ERR_INVALID);
    assert_null(f);
    metrics_destroy(m);
}

struct clash_case {
    enum metrics_type first_type;
    const char *first;
    enum metrics_type second_type;
    const char *second;
    int want;
};

static int add_typed(struct metrics *m, enum metrics_type type, const char *name)
{
    struct metrics_family *f;
    if (type == METRICS_HISTOGRAM)
        return metrics_histogram(m, name, "", NULL, 0, &f);
    if (type == METRICS_GAUGE)
        return metrics_gauge(m, name, "", METRICS_U64, &f);
    return metrics_counter(m, name, "", METRICS_U64, &f);
}

static void test_name_clashes(void **state)
{
    const enum metrics_type C = METRICS_COUNTER, G = METRICS_GAUGE, H = METRICS_HISTOGRAM;
    const struct clash_case cases[] = {
        {C, "x", C, "x", SLUICE_ERR_EXISTS},
        {C, "x", G, "x", SLUICE_ERR_EXISTS},
        {C, "x", H, "x", SLUICE_ERR_EXISTS},
        {H, "x", G, "x_count", SLUICE_ERR_EXISTS},
        {H, "x", C, "x_sum", SLUICE_ERR_EXISTS},
        {H, "x", G, "x_bucket", SLUICE_ERR_EXISTS},
        {G, "x_sum", H, "x", SLUICE_ERR_EXISTS},
        {H, "x_sum", H, "x", 0},
        {H, "a_count", H, "a", 0},
        {G, "x_total", C, "x", 0},
        {G, "x_", H, "x", 0},
        {G, "x_buckets", H, "x", 0},
        {H, "x", H, "x_bucket", 0},
        {C, "x", C, "xy", 0},
        {C, "xy", C, "x", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct clash_case *c = &cases[i];
        struct metrics *m = new_registry();
        assert_int_equal(add_typed(m, c->first_type, c->first), 0);
        int rc = add_typed(m, c->second_type, c->second);
        if (rc != c->want)
            fail_msg("case %zu: %s after %s: %d, want %d", i, c->second, c->first, rc, c->want);
        metrics_destroy(m);
    }
}

struct label_case {
    const char *name;
    const char *value;
    int want;
};

static void test_label_validation(void **state)
{
    static const struct label_case cases[] = {
        {"task", "3", 0},
        {"_x", "", 0},
        {"a9_B", "anything at all: {}=,\"\\", 0},
        {"le", "1", 0}, /* fine outside histograms */
        {"", "v", SLUICE_ERR_INVALID},
        {"__name__", "v", SLUICE_ERR_INVALID},
        {"__x", "v", SLUICE_ERR_INVALID},
        {"9a", "v", SLUICE_ERR_INVALID},
        {"a:b", "v", SLUICE_ERR_INVALID},
        {"a-b", "v", SLUICE_ERR_INVALID},
        {NULL, "v", SLUICE_ERR_INVALID},
        {"a", NULL, SLUICE_ERR_INVALID},
        /* UTF-8: good two-, three- and four-byte forms, then every kind of bad one. */
        {"a", "\xc3\xa9\xe2\x82\xac\xf4\x8f\xbf\xbf", 0},
        {"a", "\xc3", SLUICE_ERR_INVALID},
        {"a", "\xc3x", SLUICE_ERR_INVALID},
        {"a", "\x80", SLUICE_ERR_INVALID},
        {"a", "\xc0\xaf", SLUICE_ERR_INVALID},         /* overlong '/' */
        {"a", "\xe0\x80\xaf", SLUICE_ERR_INVALID},     /* overlong '/' */
        {"a", "\xed\xa0\x80", SLUICE_ERR_INVALID},     /* surrogate U+D800 */
        {"a", "\xf4\x90\x80\x80", SLUICE_ERR_INVALID}, /* above U+10FFFF */
        {"a", "\xf8\x88\x80\x80\x80", SLUICE_ERR_INVALID},
        {"a", "\xff", SLUICE_ERR_INVALID},
    };
    struct metrics *m = new_registry();
    struct metrics_family *f, *h;
    assert_int_equal(metrics_gauge(m, "g", "", METRICS_U64, &f), 0);
    assert_int_equal(metrics_histogram(m, "h", "", NULL, 0, &h), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct metrics_label l = {cases[i].name, cases[i].value};
        struct metrics_series *s = NULL;
        int rc = metrics_series_get(f, &l, 1, &s);
        if (rc != cases[i].want)
            fail_msg("case %zu: %d, want %d", i, rc, cases[i].want);
        assert_true((s != NULL) == (rc == 0));
        if (rc != 0)
            assert_null(metrics_series_find(f, &l, 1));
    }
    struct metrics_series *s = NULL;
    struct metrics_label le = {"le", "1"};
    assert_int_equal(metrics_series_get(h, &le, 1, &s), SLUICE_ERR_INVALID);
    struct metrics_label dup[] = {{"a", "1"}, {"b", "2"}, {"a", "3"}};
    assert_int_equal(metrics_series_get(f, dup, 3, &s), SLUICE_ERR_INVALID);
    assert_null(metrics_series_find(f, dup, 3));
    assert_int_equal(metrics_series_get(f, NULL, 1, &s), SLUICE_ERR_INVALID);
    assert_null(s);
    metrics_destroy(m);
}

static void test_bucket_bounds(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *f;
    const double unordered[] = {1, 0.5};
    const double equal[] = {1, 1};
    const double nan[] = {1, NAN};
    const double inf[] = {1, INFINITY};
    const double neg_inf[] = {-INFINITY, 1};
    assert_int_equal(metrics_histogram(m, "a", "", unordered, 2, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", equal, 2, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", nan, 2, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", inf, 2, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", neg_inf, 2, &f), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", NULL, 1, &f), SLUICE_ERR_INVALID);
    double many[METRICS_MAX_BUCKETS + 1];
    for (size_t i = 0; i < METRICS_MAX_BUCKETS + 1; i++)
        many[i] = (double)i - 10;
    assert_int_equal(metrics_histogram(m, "a", "", many, METRICS_MAX_BUCKETS + 1, &f),
                     SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "a", "", many, METRICS_MAX_BUCKETS, &f), 0);
    struct metrics_series *s = series0(f);
    metrics_observe(s, -10);
    metrics_observe(s, -9.5);
    metrics_observe(s, 1000);
    assert_int_equal(metrics_get_u64(s), 3);

    double b4[4];
    assert_int_equal(metrics_exponential_buckets(0.001, 10, 4, b4), 0);
    assert_true(b4[0] == 0.001 && b4[1] == 0.001 * 10 && b4[3] == 0.001 * 10 * 10 * 10);
    assert_int_equal(metrics_exponential_buckets(1, 2, 4, b4), 0);
    assert_true(b4[0] == 1 && b4[1] == 2 && b4[2] == 4 && b4[3] == 8);
    assert_int_equal(metrics_exponential_buckets(0, 2, 4, b4), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_exponential_buckets(1, 1, 4, b4), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_exponential_buckets(1, 2, 0, b4), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_exponential_buckets(NAN, 2, 1, b4), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_exponential_buckets(1, INFINITY, 1, b4), SLUICE_ERR_INVALID);
    assert_int_equal(metrics_exponential_buckets(1, 2, METRICS_MAX_BUCKETS + 1, NULL),
                     SLUICE_ERR_INVALID);
    assert_int_equal(metrics_histogram(m, "e", "", b4, 4, &f), 0);
    metrics_observe(series0(f), 3);
    assert_render(m, "# TYPE a histogram\n"
                     "a_bucket{le=\"-10\"} 1\n"
                     "a_bucket{le=\"-9\"} 2\n"
                     "a_bucket{le=\"-8\"} 2\n"
                     "a_bucket{le=\"-7\"} 2\n"
                     "a_bucket{le=\"-6\"} 2\n"
                     "a_bucket{le=\"-5\"} 2\n"
                     "a_bucket{le=\"-4\"} 2\n"
                     "a_bucket{le=\"-3\"} 2\n"
                     "a_bucket{le=\"-2\"} 2\n"
                     "a_bucket{le=\"-1\"} 2\n"
                     "a_bucket{le=\"0\"} 2\n"
                     "a_bucket{le=\"1\"} 2\n"
                     "a_bucket{le=\"2\"} 2\n"
                     "a_bucket{le=\"3\"} 2\n"
                     "a_bucket{le=\"4\"} 2\n"
                     "a_bucket{le=\"5\"} 2\n"
                     "a_bucket{le=\"6\"} 2\n"
                     "a_bucket{le=\"7\"} 2\n"
                     "a_bucket{le=\"8\"} 2\n"
                     "a_bucket{le=\"9\"} 2\n"
                     "a_bucket{le=\"10\"} 2\n"
                     "a_bucket{le=\"11\"} 2\n"
                     "a_bucket{le=\"12\"} 2\n"
                     "a_bucket{le=\"13\"} 2\n"
                     "a_bucket{le=\"14\"} 2\n"
                     "a_bucket{le=\"15\"} 2\n"
                     "a_bucket{le=\"16\"} 2\n"
                     "a_bucket{le=\"17\"} 2\n"
                     "a_bucket{le=\"18\"} 2\n"
                     "a_bucket{le=\"19\"} 2\n"
                     "a_bucket{le=\"20\"} 2\n"
                     "a_bucket{le=\"21\"} 2\n"
                     "a_bucket{le=\"22\"} 2\n"
                     "a_bucket{le=\"23\"} 2\n"
                     "a_bucket{le=\"24\"} 2\n"
                     "a_bucket{le=\"25\"} 2\n"
                     "a_bucket{le=\"26\"} 2\n"
                     "a_bucket{le=\"27\"} 2\n"
                     "a_bucket{le=\"28\"} 2\n"
                     "a_bucket{le=\"29\"} 2\n"
                     "a_bucket{le=\"30\"} 2\n"
                     "a_bucket{le=\"31\"} 2\n"
                     "a_bucket{le=\"32\"} 2\n"
                     "a_bucket{le=\"33\"} 2\n"
                     "a_bucket{le=\"34\"} 2\n"
                     "a_bucket{le=\"35\"} 2\n"
                     "a_bucket{le=\"36\"} 2\n"
                     "a_bucket{le=\"37\"} 2\n"
                     "a_bucket{le=\"38\"} 2\n"
                     "a_bucket{le=\"39\"} 2\n"
                     "a_bucket{le=\"40\"} 2\n"
                     "a_bucket{le=\"41\"} 2\n"
                     "a_bucket{le=\"42\"} 2\n"
                     "a_bucket{le=\"43\"} 2\n"
                     "a_bucket{le=\"44\"} 2\n"
                     "a_bucket{le=\"45\"} 2\n"
                     "a_bucket{le=\"46\"} 2\n"
                     "a_bucket{le=\"47\"} 2\n"
                     "a_bucket{le=\"48\"} 2\n"
                     "a_bucket{le=\"49\"} 2\n"
                     "a_bucket{le=\"50\"} 2\n"
                     "a_bucket{le=\"51\"} 2\n"
                     "a_bucket{le=\"52\"} 2\n"
                     "a_bucket{le=\"53\"} 2\n"
                     "a_bucket{le=\"+Inf\"} 3\n"
                     "a_sum 980.5\n"
                     "a_count 3\n"
                     "# TYPE e histogram\n"
                     "e_bucket{le=\"1\"} 0\n"
                     "e_bucket{le=\"2\"} 0\n"
                     "e_bucket{le=\"4\"} 1\n"
                     "e_bucket{le=\"8\"} 1\n"
                     "e_bucket{le=\"+Inf\"} 1\n"
                     "e_sum 3\n"
                     "e_count 1\n");
    metrics_destroy(m);
}

/* Many tasks come and go; only the live ones render, in the order they were made. */
static void test_churn(void **state)
{
    struct metrics *m = new_registry();
    struct metrics_family *f;
    assert_int_equal(metrics_counter(m, "c_total", "", METRICS_U64, &f), 0);
    for (int t = 0; t < 1000; t++) {
        char id[16];
        snprintf(id, sizeof id, "%d", t);
        metrics_add_u64(series1(f, "task", id), 1);
        if (t >= 2) {
            snprintf(id, sizeof id, "%d", t - 2);
            assert_int_equal(metrics_remove_label(m, "task", id), 1);
        }
    }
    assert_render(m, "# TYPE c_total counter\n"
                     "c_total{task=\"998\"} 1\n"
                     "c_total{task=\"999\"} 1\n");
    metrics_destroy(m);
}

/* Many series of two labels: each found whichever order its labels are given in, a label set
 * that differs in one value or in how its strings split is another series, and after half are
 * removed the rest are still found and the removed ones are not. */
static void test_many_series_lookup(void **state)
{
    (void)state;
    struct metrics *m = new_registry();
    struct metrics_family *f;
    assert_int_equal(metrics_gauge(m, "g", "", METRICS_U64, &f), 0);
    enum { N = 20000 };
    static struct metrics_series *made[N];
    for (int i = 0; i < N; i++) {
        char w[32], j[16];
        snprintf(w, sizeof w, "10.0.%d.%d:7000", i / 256, i % 256);
        snprintf(j, sizeof j, "%d", i % 7);
        struct metrics_label l[2] = {{"worker", w}, {"job", j}};
        assert_int_equal(metrics_series_get(f, l, 2, &made[i]), 0);
        metrics_set_u64(made[i], (uint64_t)i);
    }
    for (int i = 0; i < N; i++) {
        char w[32], j[16];
        snprintf(w, sizeof w, "10.0.%d.%d:7000", i / 256, i % 256);
        snprintf(j, sizeof j, "%d", i % 7);
        struct metrics_label l[2] = {{"job", j}, {"worker", w}};
        assert_ptr_equal(metrics_series_find(f, l, 2), made[i]);
        snprintf(j, sizeof j, "%d", i % 7 + 7);
        assert_null(metrics_series_find(f, l, 2));
    }
    struct metrics_label ab[2] = {{"worker", "a"}, {"job", "bc"}};
    struct metrics_label abc[2] = {{"worker", "ab"}, {"job", "c"}};
    struct metrics_series *s1, *s2;
    assert_int_equal(metrics_series_get(f, ab, 2, &s1), 0);
    assert_int_equal(metrics_series_get(f, abc, 2, &s2), 0);
    assert_ptr_not_equal(s1, s2);
    for (int i = 0; i < N; i += 2)
        metrics_series_remove(made[i]);
    for (int i = 0; i < N; i++) {
        char w[32], j[16];
        snprintf(w, sizeof w, "10.0.%d.%d:7000", i / 256, i % 256);
        snprintf(j, sizeof j, "%d", i % 7);
        struct metrics_label l[2] = {{"worker", w}, {"job", j}};
        if (i % 2)
            assert_int_equal(metrics_get_u64(metrics_series_find(f, l, 2)), (uint64_t)i);
        else
            assert_null(metrics_series_find(f, l, 2));
    }
    metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_series_lookup),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_labels_and_escaping),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_histogram_sum_labels),
        cmocka_unit_test(test_removal),
        cmocka_unit_test(test_number_format),
        cmocka_unit_test(test_number_format_search),
        cmocka_unit_test(test_frozen),
        cmocka_unit_test(test_metric_names),
        cmocka_unit_test(test_name_clashes),
        cmocka_unit_test(test_label_validation),
        cmocka_unit_test(test_bucket_bounds),
        cmocka_unit_test(test_churn),
    };
    return cmocka_run_group_tests(tests, 0, 0);
}
