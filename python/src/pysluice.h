/* The _sluice extension module: what its files share.
 *
 * Every blocking call into libsluice runs with the GIL released; waits are cut into slices of
 * PYS_SLICE_MS so a pending signal (Ctrl-C) is noticed between them. */
#ifndef SLUICE_PYTHON_PYSLUICE_H
#define SLUICE_PYTHON_PYSLUICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice/sluice.h"
#include "sluice/server.h"

/* Elements to Python objects: pyconv_from_element (shared with the py runtime). */
#include "pyfn/convert.h"

#define PYS_SLICE_MS 100

/* module.c: the module's entry point, which the interpreter calls on import. */
PyMODINIT_FUNC PyInit__sluice(void);

/* The exception classes (module.c): Error and its subclasses by code. */
extern PyObject *pys_error;

/* Raises the exception class for a negative libsluice code with msg (or the code's text).
 * Returns NULL for convenience. */
PyObject *pys_raise(int code, const char *msg);

/* client.c: registers the Client, Iterator and Local types on the module. */
int pys_client_types_init(PyObject *module);

/* servers.c: registers the Dispatcher and Worker types on the module. */
int pys_server_types_init(PyObject *module);

/* servers.c: a sequence of str (None: none) borrowed as a C array v[0..n) whose strings seq
 * keeps alive. pys_strs_get returns 0 or -1 with an exception set (then nothing is held); what
 * names the argument in errors. pys_strs_release frees what get took (also a zeroed struct). */
struct pys_strs {
    PyObject *seq;
    const char **v;
    size_t n;
};
int pys_strs_get(PyObject *obj, const char *what, struct pys_strs *out);
void pys_strs_release(struct pys_strs *s);

/* servers.c: the end of an __init__ that started something: 0, or -1 with the exception for
 * rc and err raised. */
int pys_started(int rc, const char *err);

#endif
