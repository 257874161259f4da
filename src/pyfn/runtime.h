/* The Python runtime of py ops (src/pipeline/pyfn.h) over CPython, for a process in which an
 * interpreter is already running: the trainer's, under the Python package, or the one
 * src/pyfn/embed.c starts in `sluice-worker` and `sluice`.
 *
 * Every entry takes the GIL itself (PyGILState_Ensure), from whichever thread calls it, and
 * releases it before returning, so pipeline threads, the trainer's threads and a standalone
 * worker's task threads share the interpreter: one Python function runs at a time in a
 * process. A call gets its element as fresh numpy arrays (copies) that belong to the call alone:
 * the function may modify them in place and return them, nothing else sees them.
 *
 * Failures become one line: an exception as "TYPE: MESSAGE (FILE:LINE)", the location being the
 * innermost frame of its traceback outside the import machinery ("ValueError: bad pixel
 * (aug.py:7)"); a result of the wrong kind as "returned str, expected ...". */
#ifndef SLUICE_PYFN_RUNTIME_H
#define SLUICE_PYFN_RUNTIME_H

#include "pipeline/pyfn.h"

/* The runtime; its entries need an initialised interpreter with numpy prepared
 * (pyconv_init). */
extern const struct pipe_py_runtime pyfn_runtime;

/* Puts dir at the front of sys.path unless it is on it already; the runtime's add_path. The
 * caller holds the GIL or not (it is taken either way). Returns 0 or SLUICE_ERR_FN with err. */
int pyfn_add_path(const char *dir, char *err, size_t errlen);

/* Formats the pending Python exception as "TYPE: MESSAGE (FILE:LINE)" into err and clears it.
 * Needs the GIL. Returns SLUICE_ERR_FN (SLUICE_ERR_NOMEM for a MemoryError). */
int pyfn_exception(char *err, size_t errlen);

#endif
