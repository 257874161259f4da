/* A system library opened on first use (dlopen) rather than linked: for dependencies that only
 * some runs need (libcurl for objects over HTTP, libarchive for tar shards), so that every other
 * start of every program does not load them and what they in turn need. */
#ifndef SLUICE_COMMON_DYNLIB_H
#define SLUICE_COMMON_DYNLIB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* One function to resolve: its name in the library, and where its pointer goes (the offset of
 * a function-pointer field in the caller's table). */
struct dynlib_fn {
    const char *name;
    size_t offset;
};

#define DYNLIB_FN(type, field, sym)                                                                \
    {                                                                                              \
#sym, offsetof(type, field)                                                                \
    }

/* Opens soname (never closed) and stores the address of each of the n functions into table
 * (at fns[i].offset). what names, for the error, what needs the library ("objects over HTTP").
 * Returns 0, or SLUICE_ERR_UNSUPPORTED with a one-line reason in err (the library cannot be
 * loaded, or lacks a function). Not thread-safe: dynlib_load below is. */
int dynlib_open(const char *soname, const char *what, const struct dynlib_fn *fns, size_t n,
                void *table, char *err, size_t errlen);

/* A library opened once, from whichever thread needs it first (DYNLIB_INIT). */
struct dynlib {
    const char *soname;
    const char *what;
    const struct dynlib_fn *fns;
    size_t n;
    void *table;
    pthread_mutex_t mu;
    bool tried;
    int rc;
    char err[512]; /* why rc is not 0 */
};

#define DYNLIB_INIT(soname, what, fns, table)                                                      \
    {                                                                                              \
        (soname), (what), (fns), sizeof(fns) / sizeof((fns)[0]), (table),                          \
            PTHREAD_MUTEX_INITIALIZER, false, 0, ""                                                \
    }

/* dynlib_open of d the first time (any thread); every later call returns the first outcome.
 * Returns 0, or SLUICE_ERR_UNSUPPORTED with the reason in err. */
int dynlib_load(struct dynlib *d, char *err, size_t errlen);

#endif
