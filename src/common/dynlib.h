/* A system library opened on first use (dlopen) rather than linked: for dependencies that only
 * some runs need (libcurl for objects over HTTP, libarchive for tar shards), so that every other
 * start of every program does not load them and what they in turn need. */
#ifndef SLUICE_COMMON_DYNLIB_H
#define SLUICE_COMMON_DYNLIB_H

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
 * loaded, or lacks a function). Not thread-safe: call it once (pthread_once). */
int dynlib_open(const char *soname, const char *what, const struct dynlib_fn *fns, size_t n,
                void *table, char *err, size_t errlen);

#endif
