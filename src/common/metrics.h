/* A registry of Prometheus metrics and its text rendering (exposition format 0.0.4).
 *
 * Pure: no I/O, no clock, no locks. A registry belongs to one thread (in the servers, the loop
 * thread) and every function below must be called on that thread; a registry is never shared.
 *
 * Model. A registry holds families; a family has a name, help text and a type (counter, gauge or
 * histogram); a family holds series, each identified by its label pairs (task="3"). A family
 * without labels has one series, the one with zero labels. Counters and gauges hold either an
 * unsigned 64-bit integer or a double, fixed when the family is made (its kind). Histograms have
 * fixed, strictly increasing, finite bucket bounds; the +Inf bucket is implicit.
 *
 * Rendering. metrics_render() writes families in the order they were made and the series of a
 * family in the order they were made; a family with no series is left out. For each family:
 *
 *     # HELP NAME HELP          (left out when the help text is empty)
 *     # TYPE NAME counter|gauge|histogram
 *     NAME{a="x",b="y"} VALUE   (no braces when the series has no labels)
 *
 * and for a histogram, per series, NAME_bucket{...,le="B"} with cumulative counts for every
 * bound, then le="+Inf", NAME_sum and NAME_count. Integers print in decimal. Doubles print with
 * the fewest significant digits that read back to the same value, in exponent form when the
 * decimal exponent is below -4 or at least 6 and plainly otherwise, as the reference Prometheus
 * client does ("0.1", "20", "0.0001", "2.5e-07", "1e+06"), with "NaN", "+Inf" and "-Inf" for the
 * special values. In HELP text a backslash prints as \\ and a newline
 * as \n; in label values, additionally, a double quote prints as \". Labels print in the order
 * they were given when their series was made.
 *
 * Validation. Metric names match [a-zA-Z_:][a-zA-Z0-9_:]*; label names match
 * [a-zA-Z_][a-zA-Z0-9_]* and may not begin with "__" (reserved by Prometheus); a histogram may
 * not use the label "le". Help text and label values must be valid UTF-8. Two families may not
 * produce the same sample name (a gauge "x_count" and a histogram "x" clash).
 *
 * Ownership. Every string passed in is copied; the caller keeps its own. Family and series
 * pointers stay valid until metrics_destroy(); a series pointer also dies when that series is
 * removed (metrics_series_remove, metrics_remove_label). */
#ifndef SLUICE_COMMON_METRICS_H
#define SLUICE_COMMON_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct metrics;
struct metrics_family;
struct metrics_series;

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

/* The value a counter or gauge holds. Histograms count in u64 and sum in double. */
enum metrics_kind { METRICS_U64, METRICS_DOUBLE };

struct metrics_label {
    const char *name;
    const char *value;
};

/* Most bucket bounds a histogram may have. */
#define METRICS_MAX_BUCKETS 64

/* Makes an empty registry. Returns 0 or SLUICE_ERR_NOMEM; the caller owns *out. */
int metrics_create(struct metrics **out);

/* Frees the registry with all its families and series. NULL is allowed. */
void metrics_destroy(struct metrics *m);

/* Adds a family. Returns 0 and sets *out (owned by the registry), SLUICE_ERR_INVALID for a bad
 * name, help text or bounds, SLUICE_ERR_EXISTS when the name or one of its sample names is taken,
 * or SLUICE_ERR_NOMEM. help may be NULL (same as ""). Histogram bounds must be finite and
 * strictly increasing, at most METRICS_MAX_BUCKETS of them; zero bounds leave only +Inf. */
int metrics_counter(struct metrics *m, const char *name, const char *help, enum metrics_kind kind,
                    struct metrics_family **out);
int metrics_gauge(struct metrics *m, const char *name, const char *help, enum metrics_kind kind,
                  struct metrics_family **out);
int metrics_histogram(struct metrics *m, const char *name, const char *help, const double *bounds,
                      size_t nbounds, struct metrics_family **out);

/* A counter (counter true) or gauge family with its one unlabelled series: metrics_counter or
 * metrics_gauge, then metrics_series_get with no labels. Returns 0 and sets *out, or their
 * errors. */
int metrics_scalar(struct metrics *m, bool counter, const char *name, const char *help,
                   enum metrics_kind kind, struct metrics_series **out);

/* Fills out[0..count) with start, start*factor, start*factor^2, ... Returns 0, or
 * SLUICE_ERR_INVALID unless start > 0, factor > 1 and 1 <= count <= METRICS_MAX_BUCKETS. */
int metrics_exponential_buckets(double start, double factor, size_t count, double *out);

/* Finds the series of f whose label set equals labels[0..nlabels) (the same pairs in any order)
 * or makes it, starting at zero. Returns 0 and sets *out, SLUICE_ERR_INVALID for a bad or
 * repeated label name or a value that is not UTF-8, or SLUICE_ERR_NOMEM. labels may be NULL when
 * nlabels is 0. */
int metrics_series_get(struct metrics_family *f, const struct metrics_label *labels, size_t nlabels,
                       struct metrics_series **out);

/* The series of f with exactly this label set, or NULL. */
struct metrics_series *metrics_series_find(const struct metrics_family *f,
                                           const struct metrics_label *labels, size_t nlabels);

/* Removes and frees s: it no longer renders. s is invalid afterwards. */
void metrics_series_remove(struct metrics_series *s);

/* Removes every series, in every family, that has the label name="value" (for instance all the
 * series of a task that ended). Returns how many were removed; their pointers are invalid. */
size_t metrics_remove_label(struct metrics *m, const char *name, const char *value);

/* Updates. Each asserts that the series' family has the type and kind the function is for
 * (in a build without assertions a wrong call changes nothing):
 *  - metrics_add_u64:    counter or gauge of kind U64; wraps like unsigned arithmetic.
 *  - metrics_sub_u64:    gauge of kind U64; stops at 0 instead of wrapping.
 *  - metrics_set_u64:    counter or gauge of kind U64 (a counter may be set to mirror a total
 *                        kept elsewhere).
 *  - metrics_add_double: counter or gauge of kind DOUBLE; a counter ignores a negative or NaN
 *                        amount, so it never decreases by adding.
 *  - metrics_set_double: counter or gauge of kind DOUBLE.
 *  - metrics_observe:    histogram; counts v in the first bucket whose bound is >= v (+Inf
 *                        when none) and adds it to the sum. NaN is ignored. */
void metrics_add_u64(struct metrics_series *s, uint64_t n);
void metrics_sub_u64(struct metrics_series *s, uint64_t n);
void metrics_set_u64(struct metrics_series *s, uint64_t v);
void metrics_add_double(struct metrics_series *s, double v);
void metrics_set_double(struct metrics_series *s, double v);
void metrics_observe(struct metrics_series *s, double v);

/* Reads back a value; the same type and kind rules as the setters. For a histogram,
 * metrics_get_u64 gives its count and metrics_get_double its sum. */
uint64_t metrics_get_u64(const struct metrics_series *s);
double metrics_get_double(const struct metrics_series *s);

/* Renders the whole registry as described above into a new NUL-terminated buffer. Returns 0 and
 * sets *out (the caller frees it with free()) and *len (the length without the NUL), or
 * SLUICE_ERR_NOMEM with *out untouched. An empty registry renders as "". */
int metrics_render(const struct metrics *m, char **out, size_t *len);

/* A registry's samples as they are now, to be rendered elsewhere: the text of every line copied,
 * its number kept unformatted (formatting the numbers is most of a render's time). A frozen copy
 * shares nothing with its registry, so it may be rendered on another thread while the registry
 * changes. metrics_freeze returns 0 and sets *out (free it with metrics_frozen_free), or
 * SLUICE_ERR_NOMEM. metrics_frozen_render renders it exactly as metrics_render rendered the
 * registry at the freeze (metrics_render is the two in a row); it may run on any thread, one at a
 * time per frozen copy, and returns as metrics_render. */
struct metrics_frozen;
int metrics_freeze(const struct metrics *m, struct metrics_frozen **out);
int metrics_frozen_render(const struct metrics_frozen *f, char **out, size_t *len);
void metrics_frozen_free(struct metrics_frozen *f);

#endif
