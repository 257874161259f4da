/* map(py, "module:function" [, ARG...]) and filter(py, ...): user Python functions.
 *
 * The pipeline engine has no Python of its own. Every registry knows `py` (pipe_builtins
 * registers it), so its arguments are checked the same way everywhere, with or without Python:
 * a client registering a pipeline, a dispatcher, a worker. The first argument names the
 * function, "module:function" (dotted names allowed on both sides: "pkg.aug:Flip.apply"); the
 * others are literals (integers, floats, strings, bools) passed after the element.
 *
 * Running a py op takes a Python runtime: a process that has an interpreter installs one,
 * process-wide, before its pipelines run: `sluice-worker` and `sluice` embed CPython
 * (src/pyfn/embed.h, when built with SLUICE_PYTHON), and the Python package installs one that
 * runs in the trainer's own interpreter (python/src/module.c). Without one, a py op fails on its
 * first element with "map(py, "aug:flip"): this worker has no Python support".
 *
 * Each op binds once, on its pipeline thread before its first element: the runtime imports the
 * module and keeps the callable for the op's life; calls then convert, call and convert back.
 *
 * On a server (a worker) code comes only from the server's own configuration: a registry
 * confined by pipe_registry_confine() binds a py op only when its module lies in one of the
 * worker's python_path directories, so a pipeline cannot call into the standard library (os,
 * subprocess, builtins, importlib, ...) or site-packages. Local runs (the trainer's own pipeline,
 * in the trainer's own process) are not confined. */
#ifndef SLUICE_PIPELINE_PYFN_H
#define SLUICE_PIPELINE_PYFN_H

#include "roots.h"
#include "sluice/sluice.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>

/* The most extra arguments a py op takes after "module:function". */
#define PIPE_PY_MAX_EXTRA 16
/* The longest "module:function" text, in bytes. */
#define PIPE_PY_TARGET_MAX 255

/* What a Python runtime does for py ops. Every function may be called from any pipeline thread,
 * several at once (the runtime serialises what it must: CPython's GIL). Failures return a
 * negative code with a one-line reason in err, which the op reports after its label:
 * "ModuleNotFoundError: No module named 'aug'", "ValueError: bad pixel (aug.py:7)". */
struct pipe_ctx; /* iter.h */

struct pipe_py_runtime {
    /* Imports module, resolves function in it (both NUL-terminated, validated by the check)
     * and converts the extra literal arguments args[0..nargs); returns 0 and *state, which the
     * calls below get, or a failure. With dirs non-NULL (a server's py ops, see
     * pipe_registry_confine) the op is confined: before anything is imported, the module's
     * top-level package must be found (importlib.util.find_spec) at a location that resolves
     * within one of dirs, else SLUICE_ERR_DENIED with "module 'os' is not in the worker's
     * --python-path"; function may not lead through another module ("aug:np.load": "... leads
     * into module 'numpy'; ..."); and the callable must have been defined in a module loaded
     * from within dirs (its __module__), so that what an allowed module imported is not
     * reachable through it ("aug:load" after "load = np.load": "aug:load is defined in module
     * 'numpy', which is not in the worker's --python-path"). */
    int (*bind)(const char *module, const char *function, const struct pipe_value *args,
                size_t nargs, const struct pipe_roots *dirs, void **state, char *err,
                size_t errlen);
    /* Calls the function on elem (converted to Python) and the extra arguments, and replaces
     * elem by what it returns. ctx (iter.h; may be NULL) is the calling chain's context: once it
     * is cancelled (pipe_cancelled) the call is interrupted at the function's next bytecode
     * boundary and fails with SLUICE_ERR_CANCELLED "cancelled". */
    int (*map)(void *state, struct sluice_element *elem, const struct pipe_ctx *ctx, char *err,
               size_t errlen);
    /* Calls the function on elem and the extra arguments; *keep is its result's truth. */
    int (*filter)(void *state, const struct sluice_element *elem, const struct pipe_ctx *ctx,
                  int *keep, char *err, size_t errlen);
    /* Frees a state from bind. */
    void (*unbind)(void *state);
    /* Puts dir at the front of the interpreter's module search path (sys.path), unless it is on
     * it already. */
    int (*add_path)(const char *dir, char *err, size_t errlen);
};

/* Installs rt as this process's Python runtime; rt must stay valid for the life of the process
 * (ops bound with it keep using it). Any thread; ops bound afterwards use it. Exported by
 * libsluice (cmake/libsluice.map) for the Python package's extension, which installs the
 * runtime of the interpreter it runs in; nothing else should call it. */
void sluice_python_runtime_install(const struct pipe_py_runtime *rt);

/* Whether a Python runtime is installed. */
bool pipe_py_available(void);

/* Puts dir at the front of sys.path through the installed runtime. Returns 0, or
 * SLUICE_ERR_UNSUPPORTED ("this worker has no Python support") when there is none, or the
 * runtime's failure, with the reason in err. */
int pipe_py_add_path(const char *dir, char *err, size_t errlen);

/* Splits "module:function" (len bytes, not necessarily NUL-terminated) into NUL-terminated
 * module and function, each a dotted sequence of identifiers. Returns 0, or SLUICE_ERR_INVALID
 * with the reason in err. Pure. */
int pipe_py_split_target(const char *text, size_t len, char module[PIPE_PY_TARGET_MAX + 1],
                         char function[PIPE_PY_TARGET_MAX + 1], char *err, size_t errlen);

/* Registers py (map and filter, with its check and per-op binding) into reg. Returns 0 or the
 * registration's failure. Called by pipe_builtins_register(). */
int pipe_py_register(struct sluice_registry *reg);

#endif
